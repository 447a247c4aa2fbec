"""A loopback webhook receiver for tests: records each delivery and checks it with the documented verifier."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from memory.webhooks.receiver import verify_ekko_signature


class Receiver(BaseHTTPRequestHandler):
    """Answers each POST with the next of `statuses` (then 204); `secret` set by the test."""

    requests: list[dict] = []
    statuses: list[int] = []
    secret = ""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status = type(self).statuses.pop(0) if type(self).statuses else 204
        type(self).requests.append(
            {
                "path": self.path,
                "headers": dict(self.headers.items()),
                "raw": body,
                "json": json.loads(body),
                "verified": verify_ekko_signature(
                    type(self).secret, body, self.headers.get("Ekko-Signature", "")
                ),
                "answered": status,
            }
        )
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def receiver(statuses: list[int] | None = None) -> type[Receiver]:
    """Return a fresh receiver class (its own request list and answers)."""
    return type("TestReceiver", (Receiver,), {"requests": [], "statuses": list(statuses or []), "secret": ""})
