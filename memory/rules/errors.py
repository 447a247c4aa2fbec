"""The error every pure rule raises: a machine `code`, a `detail` saying how to fix it and the `field`.

Services turn it into the matching API error (`memory.errors.from_schema_error`), rendered as
`{"code", "detail", "errors": {field: [detail]}}`.
"""

from __future__ import annotations

from typing import Literal

SchemaErrorCode = Literal["invalid", "sensitive_content", "forbidden"]


class SchemaError(ValueError):
    """A rule was broken; `detail` says how to fix it and `field` names the offending input."""

    def __init__(self, code: SchemaErrorCode, detail: str, field: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.field = field
