"""Python client for the Ekko Memory agent API: sync and async clients, typed models, one error per code."""

from ekko_client import errors, models
from ekko_client._transport import RetryPolicy
from ekko_client.client import AsyncEkkoClient, EkkoClient
from ekko_client.errors import EkkoError

__all__ = ["AsyncEkkoClient", "EkkoClient", "EkkoError", "RetryPolicy", "errors", "models"]
__version__ = "0.1.0"
