"""``_frozen.builder``: the per-batch objects built with their slots set directly are the
objects their classes build (same class, fields, equality, hash, immutability)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from embedlog._batch import record_batch
from embedlog._frozen import builder
from embedlog.records import RecordBatch
from embedlog.segment import _native
from embedlog.segment import format as fmt
from embedlog.segment.decoded import DecodedRecords, new_decoded

ints = st.integers(-(2**63), 2**63 - 1)


@given(st.lists(ints, min_size=13, max_size=13))
def test_a_built_header_is_the_header_the_class_builds(values: list[int]) -> None:
    made, built = fmt.BatchHeader(*values), builder(fmt.BatchHeader)(*values)
    assert type(built) is fmt.BatchHeader
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert dataclasses.astuple(built) == tuple(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.base_offset = 1  # type: ignore[misc]


def test_decoded_columns_and_record_batches_are_built_whole() -> None:
    batch = fmt.encode_batch([b"ab", None], keys=[b"k", b""], timestamps=[5, 9],
                             base_offset=40, compression=fmt.Compression.GZIP)
    header = fmt.parse_header(batch, 0)
    r = fmt.decode_records(batch, 0, header)
    fields = [getattr(r, f.name) for f in dataclasses.fields(DecodedRecords)]
    again = new_decoded(*fields)
    assert type(again) is DecodedRecords and again.values() == [b"ab", None]
    rb = record_batch("t", 2, header, r)
    assert type(rb) is RecordBatch and rb.compression == "gzip" and rb.last_offset == 41
    assert rb.keys() == [b"k", b""] and np.array_equal(rb.timestamps, [5, 9])
    assert [getattr(rb, f.name) is getattr(dataclasses.replace(rb), f.name)
            for f in dataclasses.fields(RecordBatch)] == [True] * 20


@dataclasses.dataclass(frozen=True)
class _Unslotted:
    a: int


@dataclasses.dataclass(slots=True)
class _Mutable:
    a: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError(self.a)


@dataclasses.dataclass(frozen=True, slots=True)
class _Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)


@pytest.mark.parametrize("cls", [_Unslotted, _Mutable, _Checked, _Derived, int])
def test_only_plain_frozen_slotted_dataclasses_get_a_builder(cls: type) -> None:
    with pytest.raises(TypeError):
        builder(cls)


core_only = pytest.mark.skipif(_native.CORE is None, reason="no compiled codec core")


@core_only
@given(st.lists(ints, min_size=13, max_size=13))
def test_the_compiled_builder_builds_what_the_python_one_builds(values: list[int]) -> None:
    compiled, python = builder(fmt.BatchHeader), builder(fmt.BatchHeader, compiled=False)
    assert type(compiled) is not type(python)  # the core's SlotBuilder, a generated function
    made, built = python(*values), compiled(*values)
    assert type(built) is fmt.BatchHeader
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert dataclasses.astuple(built) == tuple(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.base_offset = 1  # type: ignore[misc]


@core_only
def test_the_compiled_builder_refuses_what_the_python_one_refuses() -> None:
    for make in (builder(fmt.BatchHeader), builder(fmt.BatchHeader, compiled=False)):
        with pytest.raises(TypeError):
            make(*range(12))  # a field short
        with pytest.raises(TypeError):
            make(*range(14))  # one too many
        with pytest.raises(TypeError):
            make(*range(12), records_count=1)  # positional only
    assert builder(fmt.BatchHeader)(*range(13)).records_count == 12


@core_only
def test_slot_builders_take_only_plain_classes_and_data_descriptors() -> None:
    assert _native.CORE is not None
    make = _native.CORE.SlotBuilder
    with pytest.raises(TypeError):
        make(int, ())  # an int is made by its own __new__
    with pytest.raises(TypeError):
        make(_Mutable, (1,))  # not a descriptor
    with pytest.raises(TypeError):
        make(_Mutable, (_Mutable.__init__,))  # a function: no __set__
    with pytest.raises(TypeError):
        make(_Mutable, [vars(_Mutable)["a"]])  # setters: a tuple
    wrong = make(_Mutable, (vars(fmt.BatchHeader)["base_offset"],))
    with pytest.raises(TypeError):
        wrong(1)  # another class's slot: its descriptor refuses the object
    plain = make(_Mutable, (vars(_Mutable)["a"],))
    assert plain(b"x") == _Mutable(b"x")
