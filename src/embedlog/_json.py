"""Parsing JSON embedlog does not trust: the documents of the log folder (``embedlog.json``,
``embedlog.tiering``, the remote manifest, a group's ``state.json``, the transaction state's
records and legacy file), a file or a line given to the command line, a Spark option.

:func:`load_untrusted` is the one parse step of all of them. Its rules:

* a bound on the input's length, when the caller gives one (in bytes, or characters for a
  ``str``), checked before anything is decoded;
* bytes are strict UTF-8: no BOM, no surrogate code point encoded in UTF-8, none of the UTF-16
  and UTF-32 encodings ``json.loads`` would detect;
* the standard's JSON only: ``NaN``, ``Infinity`` and ``-Infinity`` are refused, and so is a
  number too large for a finite float (``1e400``), so no document yields a non-finite float;
* every way the parse fails -- too long, not UTF-8, not JSON, a non-finite number, nested deeper
  than the interpreter's recursion limit (``RecursionError``), an integer of more digits than
  ``sys.get_int_max_str_digits()`` -- is the one exception the caller makes of a short reason,
  ``fail(reason)``, raised ``from None``. Nothing else escapes.

The caller keeps how it reads the input (regular files through ``_io``, bounded reads) and checks
the shape of the document it gets back. This module imports nothing from embedlog.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Final, NoReturn

__all__ = ["load_untrusted"]


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of a float's range")
    return value


#: The one decoder: ``json``'s compiled scanner with the two hooks above.
_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def load_untrusted(raw: bytes | str, *, limit: int | None,
                   fail: Callable[[str], Exception]) -> Any:
    """The JSON value in ``raw`` (a dict, list, str, int, finite float, bool or None), parsed
    by the module's rules; ``fail(reason)`` raised for anything else. ``limit`` bounds
    ``len(raw)`` (``None``: no bound, for input bounded before it arrives here)."""
    if limit is not None and len(raw) > limit:
        unit = "characters" if isinstance(raw, str) else "bytes"
        raise fail(f"larger than {limit} {unit}") from None  # even inside a caller's except
    try:
        return _DECODER.decode(raw if isinstance(raw, str) else raw.decode("utf-8"))
    except RecursionError:
        reason = "nested too deeply"
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = str(exc)
    raise fail(reason) from None
