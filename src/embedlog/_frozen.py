"""Building frozen, slotted dataclasses on hot paths without their ``__init__``'s detour.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (its
own ``__setattr__`` refuses), looking that up again for every field. :func:`builder` generates,
the way :mod:`dataclasses` generates ``__init__``, a function taking every field positionally
(only) that sets the same slots through their descriptors: the object is the same (same class,
same slots, equal to and hashing like one built by the class), built two to three times faster. It
is used where one is built per stored batch (a batch header, its decoded columns, a
``RecordBatch``).

Only for classes whose ``__init__`` does nothing else: frozen, slotted, every field taken by
``__init__``, no ``__post_init__`` (checked when the builder is made). Values are not checked,
as the class's ``__init__`` does not check them either.

With the compiled codec core the builder is its ``SlotBuilder``: the same ``object.__new__`` and
the same descriptors' ``__set__``, called from C (some ten times faster than the generated
function, which stays the reference: ``EMBEDLOG_PURE=1``, or ``compiled=False``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

from embedlog.segment import _native

__all__ = ["builder"]

T = TypeVar("T")


def builder(cls: type[T], *, compiled: bool = True) -> Callable[..., T]:
    """``cls(*values)`` for a frozen, slotted dataclass ``cls`` (see the module notes): the
    compiled core's when it runs and ``compiled``, else a generated Python function; TypeError
    for any other class."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or not all(f.init for f in fields):
        raise TypeError(f"{cls.__name__}.__init__ does more than set its fields")
    names = [f.name for f in fields]
    core = _native.CORE
    if compiled and core is not None:
        return cast("Callable[..., T]",
                    core.SlotBuilder(cls, tuple(vars(cls)[name] for name in names)))
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    scope.update({f"_set_{name}": vars(cls)[name].__set__ for name in names})
    sets = "".join(f"    _set_{name}(self, {name})\n" for name in names)
    source = f"def build({', '.join(names)}, /):\n    self = _new(_cls)\n{sets}    return self\n"
    exec(source, scope)  # the same technique as dataclasses' own __init__
    build: Callable[..., T] = scope["build"]
    build.__qualname__ = f"build_{cls.__name__}"
    build.__doc__ = f"{cls.__name__}(*fields), its slots set directly."
    return build
