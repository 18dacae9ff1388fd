"""atheris target: the producer's compiled lane (``embedlog._clane.Lane``) against the pure one.

Each input is a program: every step picks an operation (attach fresh columns with or without a
ticket, arm with limits, disarm, add or join a record, push a record, or lengthen one column
behind the lane's back)
and its arguments from the fuzzer's bytes -- byte strings, ``None``, text, bools, ints at and
beyond the int64 bounds. Both lanes run the same program and must give equal results (the
same RecordMetadata and ticket, or ``None``), raise the same exception types, and leave equal
columns, sizes and armed flags after every step. Coverage guidance comes from the instrumented pure
lane. Skips (exit 0 at once) when the compiled lane is not built.
"""

import sys

import atheris  # type: ignore[import-untyped]
import numpy  # noqa: F401 - imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.producer_lane import PyLane
    from embedlog.records import RecordMetadata

try:
    from embedlog import _clane
except ImportError:
    _clane = None

TICKETS = (object(), object())
EDGES = (0, 1, 31, 32, 61, 100, 4096, -1, (1 << 63) - 1, 1 << 63, -(1 << 63), -(1 << 63) - 1)


def _int(fdp: "atheris.FuzzedDataProvider") -> int:
    if fdp.ConsumeBool():
        return EDGES[fdp.ConsumeIntInRange(0, len(EDGES) - 1)]
    return int(fdp.ConsumeIntInRange(-8, 5000))


def _item(fdp: "atheris.FuzzedDataProvider") -> object:
    kind = fdp.ConsumeIntInRange(0, 7)
    if kind <= 3:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    return (None, "text", bytearray(b"ba"), True)[kind - 4]


def _stamp(fdp: "atheris.FuzzedDataProvider") -> object:
    return _int(fdp) if fdp.ConsumeIntInRange(0, 4) else (None, True, 2.5, b"1")[
        fdp.ConsumeIntInRange(0, 3)]


def _step(fdp: "atheris.FuzzedDataProvider") -> tuple[str, tuple[object, ...]]:
    op = fdp.ConsumeIntInRange(0, 7)
    if op == 0:
        if fdp.ConsumeBool():
            return "attach", (_int(fdp), _int(fdp), TICKETS[fdp.ConsumeIntInRange(0, 1)])
        return "attach", (_int(fdp), _int(fdp))
    if op == 1:
        return "arm", (_int(fdp), _int(fdp), _int(fdp), fdp.ConsumeBool(), _int(fdp))
    if op == 2:
        return "disarm", ()
    if op in (3, 4):
        return "add", ("t", _item(fdp), _item(fdp), _stamp(fdp))
    if op == 5:
        return "push", (_item(fdp), _item(fdp), _stamp(fdp), _int(fdp))
    if op == 6:
        return "join", ("t", _item(fdp), _item(fdp), _stamp(fdp))
    return "tamper", (fdp.ConsumeIntInRange(0, 2),)


class Run:
    def __init__(self, lane: object) -> None:
        self.lane = lane
        self.cols: list[list[object]] = [[], [], []]

    def do(self, name: str, args: tuple[object, ...]) -> object:
        try:
            if name == "attach":
                self.cols = [[], [], []]
                return self.lane.attach(*self.cols, *args)  # type: ignore[attr-defined]
            if name == "tamper":
                self.cols[int(args[0])].append(b"x")  # type: ignore[call-overload]
                return None
            return getattr(self.lane, name)(*args)
        except (TypeError, ValueError, OverflowError) as exc:
            return type(exc)

    def state(self) -> object:
        return self.cols, self.lane.size, self.lane.armed  # type: ignore[attr-defined]


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    index = fdp.ConsumeIntInRange(0, 3)
    c = Run(_clane.Lane(RecordMetadata, index, 32))
    py = Run(PyLane(RecordMetadata, index, 32))
    for _ in range(fdp.ConsumeIntInRange(0, 64)):
        name, args = _step(fdp)
        got, want = c.do(name, args), py.do(name, args)
        if got != want or type(got) is not type(want):
            raise AssertionError(f"{name}{args!r}: compiled {got!r}, pure {want!r}")
        if c.state() != py.state():
            raise AssertionError(f"{name}{args!r}: {c.state()!r} != {py.state()!r}")


def main() -> None:
    if _clane is None:
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
