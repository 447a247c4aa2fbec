"""Signing secrets: generated here, shown once, stored only as a Fernet token.

The Fernet key is derived with HKDF-SHA256 from EKKO_WEBHOOK_KEY, or from SECRET_KEY when that is
empty, so a copy of the database alone cannot sign as Ekko. Changing the key makes stored secrets
unreadable: rotate every endpoint's secret afterwards.
"""

from __future__ import annotations

import base64
import secrets

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SECRET_PREFIX = "whsec_"


def _fernet() -> Fernet:
    material = (settings.EKKO_WEBHOOK_KEY or settings.SECRET_KEY).encode()
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"ekko webhook secrets").derive(material)
    return Fernet(base64.urlsafe_b64encode(key))


def secret_generate() -> str:
    """Return a new signing secret (`whsec_` and 32 random bytes, URL-safe base64)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_encrypt(secret: str) -> str:
    """Return the Fernet token stored for `secret`."""
    return _fernet().encrypt(secret.encode()).decode()


def secret_decrypt(token: str) -> str:
    """Return the secret behind a stored Fernet token."""
    return _fernet().decrypt(token.encode()).decode()
