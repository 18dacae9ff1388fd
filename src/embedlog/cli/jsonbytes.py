"""Keys, values and header values in JSON, both ways.

Bytes that are valid UTF-8 are a JSON string; other bytes are ``{"base64": "..."}``; a null key
or value is ``null``. On input any other JSON value (number, list, object) stands for its compact
JSON text, so ``{"value": {"page": "/"}}`` stores ``{"page":"/"}``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ..errors import UsageError

__all__ = ["from_json", "to_json"]


def to_json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def from_json(field: Any, what: str) -> bytes | None:
    """The bytes ``field`` stands for; :class:`~embedlog.errors.UsageError` naming ``what``
    for invalid base64 or a string with a lone surrogate."""
    if field is None:
        return None
    if isinstance(field, str):
        try:
            return field.encode()
        except UnicodeEncodeError:  # JSON's "\ud800": a lone surrogate has no UTF-8
            raise UsageError(f"{what} is not valid Unicode (a lone surrogate)") from None
    if isinstance(field, dict) and set(field) == {"base64"}:
        try:
            return base64.b64decode(field["base64"], validate=True)
        except (binascii.Error, TypeError):
            raise UsageError(f"{what} has invalid base64") from None
    return json.dumps(field, separators=(",", ":")).encode()
