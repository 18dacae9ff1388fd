"""``embedlog._json.load_untrusted``, the one parse step of every JSON document embedlog reads:
its rules (bound, strict UTF-8, standard JSON, every failure the caller's exception) and each
reader's use of it (the reader's own error class for what the loader refuses)."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import _json, txn_state_log
from embedlog.cli import cli
from embedlog.errors import CorruptCheckpointError, InvalidConfigError
from embedlog.groups.membership import GroupState
from embedlog.metadata import parse_metadata
from embedlog.naming import TIERING_FILE
from embedlog.spark.options import parse_read_options
from embedlog.spark.specs import json_object
from embedlog.tiering import remote_manifest
from embedlog.tiering.manager import read_uri

load = _json.load_untrusted


class Refused(Exception):
    """What the tests' ``fail`` makes: the reason kept for the assertions."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _refused(raw: bytes | str, limit: int | None = None) -> Refused:
    with pytest.raises(Refused) as info:
        load(raw, limit=limit, fail=Refused)
    exc = info.value
    assert exc.__cause__ is None and exc.__suppress_context__  # raised ``from None``
    return exc


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_values, st.booleans(), st.booleans())
def test_a_standard_document_reads_back_as_written(value: Any, ascii_only: bool,
                                                   as_text: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    raw: bytes | str = text if as_text else text.encode("utf-8")
    assert load(raw, limit=len(raw), fail=Refused) == value
    assert load(raw, limit=None, fail=Refused) == value


_jsonish = st.lists(st.sampled_from([
    b"{", b"}", b"[", b"]", b",", b":", b'"', b"a", b"\\", b"u", b"0", b"1", b"-", b".", b"e",
    b"9" * 30, b"null", b"true", b"NaN", b"Infinity", b"1e400", b" ", b"\xff", b"\xc3\xa9",
    b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x00",
]), max_size=30).map(b"".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=40), _jsonish))
def test_any_bytes_are_a_finite_standard_value_or_refused(raw: bytes) -> None:
    """The loader agrees with ``json.loads`` of the strict UTF-8 text on every document both
    take, and refuses -- only ever through ``fail`` -- the ones with a non-finite number."""
    try:
        expected = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        _refused(raw)
        return
    if _finite(expected):
        assert load(raw, limit=None, fail=Refused) == expected
    else:
        _refused(raw)


@pytest.mark.parametrize("raw", [
    b"\xff", b'"\xc0\xaf"', b'"\xed\xa0\x80"',  # invalid start, overlong, encoded surrogate
    b'{"a": "\xe9"}',  # Latin-1
    b"\xef\xbb\xbf{}",  # a UTF-8 BOM
    '{"a": 1}'.encode("utf-16"), '{"a": 1}'.encode("utf-32-le"),  # json.loads detects these
], ids=["ff", "overlong", "surrogate", "latin-1", "bom", "utf-16", "utf-32"])
def test_bytes_must_be_strict_utf8(raw: bytes) -> None:
    assert _refused(raw).reason


@pytest.mark.parametrize("doc", ["[" * 100_000 + "]" * 100_000,
                                 '{"a":' * 100_000 + "1" + "}" * 100_000,
                                 '{"a": [' + "[" * 100_000 + "]" * 100_000 + "]}"],
                         ids=["array", "object", "inner"])
def test_a_document_nested_past_the_recursion_limit_is_refused(doc: str) -> None:
    with pytest.raises(RecursionError):  # the premise: json.loads itself gives up
        json.loads(doc)
    assert _refused(doc).reason == "nested too deeply"
    assert _refused(doc.encode()).reason == "nested too deeply"


@pytest.mark.parametrize("doc", ["NaN", "Infinity", "-Infinity", "[1, NaN]",
                                 '{"a": {"b": Infinity}}', "1e400", "-1e400", "[2.5e999]"])
def test_non_finite_numbers_are_refused(doc: str) -> None:
    reason = _refused(doc).reason
    assert "is not a JSON number" in reason or "out of a float's range" in reason


def test_finite_floats_and_long_integers_within_the_interpreter_limit_are_kept() -> None:
    assert load(b"[1e308, -0.0, 5e-324, 0.5]", limit=None, fail=Refused) == [
        1e308, -0.0, 5e-324, 0.5]
    assert load("9" * 4000, limit=None, fail=Refused) == int("9" * 4000)
    assert "digits" in _refused("9" * 5000).reason  # past sys.get_int_max_str_digits()


@given(_values, st.integers(0, 3))
def test_the_bound_is_on_the_length_and_checked_first(value: Any, over: int) -> None:
    raw = json.dumps(value).encode()
    assert load(raw, limit=len(raw), fail=Refused) == value
    if len(raw) > over:
        limit = len(raw) - 1 - over
        assert _refused(raw, limit).reason == f"larger than {limit} bytes"
        assert _refused(raw.decode(), limit).reason == f"larger than {limit} characters"


def test_the_bound_comes_before_decoding_and_parsing() -> None:
    assert _refused(b"\xff" * 10, 9).reason == "larger than 9 bytes"
    assert _refused("[" * 100_000, 10).reason == "larger than 10 characters"


@pytest.mark.parametrize("raw", [b"", b"   ", b"{} x", b"{'a': 1}", b'{"a": 1,}', b"[1 2]",
                                 b'"\\x41"', b"01"])
def test_what_is_not_json_is_refused(raw: bytes) -> None:
    assert _refused(raw).reason


def test_the_module_imports_nothing_of_embedlog() -> None:
    """``_json`` sits at the bottom of the import graph: every reader may use it."""
    tree = ast.parse(Path(_json.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("embedlog")
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("embedlog") for a in node.names)


# ------------------------------------------------------------------------------ the readers

_BAD = [b"NaN", b"\xff{}", b"[" * 50_000 + b"]" * 50_000, b"{} x"]
_BAD_IDS = ["nan", "utf8", "deep", "extra"]


@pytest.mark.parametrize("raw", _BAD, ids=_BAD_IDS)
def test_the_folder_readers_refuse_with_a_checkpoint_error(tmp_path: Path, raw: bytes) -> None:
    readers: list[tuple[Callable[[], object], str]] = [
        (lambda: parse_metadata(raw), "topic metadata: unreadable: "),
        (lambda: remote_manifest.parse(raw, path="m"), "malformed remote manifest: "),
        (lambda: txn_state_log._parse(raw, "s"), "malformed transaction state record: "),
        (lambda: txn_state_log._legacy(raw, "s"), "malformed transaction state: "),
    ]
    (tmp_path / "state.json").write_bytes(raw)
    readers.append((lambda: GroupState.read(str(tmp_path / "state.json")),
                    "unreadable group state: "))
    (tmp_path / TIERING_FILE).write_bytes(raw)
    readers.append((lambda: read_uri(str(tmp_path)), "malformed tiering file: "))
    for read, prefix in readers:
        with pytest.raises(CorruptCheckpointError) as info:
            read()
        assert prefix in str(info.value) and info.value.__cause__ is None


def test_a_non_finite_number_in_the_topic_table_is_refused_before_the_config_check() -> None:
    doc = b'{"version": 1, "topics": {"t": {"partitions": 1, "config": {"x": NaN}}}}'
    with pytest.raises(CorruptCheckpointError, match="unreadable: NaN is not a JSON number"):
        parse_metadata(doc)


@pytest.mark.parametrize("raw", ["NaN", "[Infinity]", "[" * 50_000, '{"a": 1} x'])
def test_the_spark_options_refuse_with_a_config_error(raw: str) -> None:
    with pytest.raises(InvalidConfigError, match="assign: not valid JSON"):
        json_object("assign", raw, "{}")
    with pytest.raises(InvalidConfigError, match="paths: not a JSON list"):
        parse_read_options({"paths": raw, "subscribe": "t"}, streaming=False)


@pytest.mark.parametrize("line", [b'{"value": NaN}', b'{"value": 1e400}', b'{"value": "\xff"}',
                                  b'{"value": "a"} x'])
def test_produce_refuses_a_line_the_loader_refuses(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
    result = CliRunner(env={"EMBEDLOG_DIR": str(path)}).invoke(
        cli, ["produce", "t", "--format", "json"], input=b'{"value": "ok"}\n' + line)
    assert result.exit_code == 1 and "line 2: invalid JSON (" in result.stderr
    with embedlog.open(path, read_only=True) as log:
        assert list(log.read("t", 0)) == []


@pytest.mark.parametrize("doc, fragment", [
    (b'{"partitions": [{"topic": "t", "partition": 0, "offset": NaN}], "version": 1}',
     "NaN is not a JSON number; expected"),
    (b'{"partitions": [{"topic": "t", "partition": 0, "offset": 1}]} x', "Extra data"),
    (b'{"partitions": [{"topic": "t", "partition": 0}], "version": 1}', "json: expected"),
])
def test_delete_records_names_what_the_offset_file_lacks(tmp_path: Path, doc: bytes,
                                                         fragment: str) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
        log.append_batch("t", [b"a", b"b"])
    spec = tmp_path / "offsets.json"
    spec.write_bytes(doc)
    result = CliRunner(env={"EMBEDLOG_DIR": str(path)}).invoke(
        cli, ["delete-records", "--offset-json-file", str(spec)])
    assert result.exit_code == 1 and fragment in result.stderr, result.stderr
    with embedlog.open(path, read_only=True) as log:
        assert [r.value for r in log.read("t", 0)] == [b"a", b"b"]
