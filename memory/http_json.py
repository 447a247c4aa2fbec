"""POST JSON to an OpenAI-compatible endpoint with the standard library, errors turned into one exception type."""

from __future__ import annotations

import urllib.error
import urllib.request


def post_json(url: str, body: bytes, *, api_key: str, timeout: float, error: type[Exception], label: str,
              hint: str) -> bytes:
    """Return the raw answer of `POST url`; raise `error` with a sentence naming `label` and `hint` on failure."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    too_slow = f"{label} {url} did not answer within {timeout:g}s."
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace").strip()
        raise error(f"{label} {url} answered HTTP {exc.code}: {detail or exc.reason}. {hint}") from exc
    except TimeoutError as exc:
        raise error(too_slow) from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise error(too_slow) from exc
        raise error(f"{label} {url} is unreachable: {exc.reason}.") from exc
    except OSError as exc:
        raise error(f"{label} {url} failed: {exc}.") from exc
