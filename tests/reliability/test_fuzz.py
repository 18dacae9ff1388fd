"""Fuzzing with atheris (issue 7, item 5; reliability.md sections 3.2, 3.3, G7 and G8).

Each target in ``fuzz_targets/`` runs in its own subprocess under libFuzzer limits
(``-rss_limit_mb``, ``-malloc_limit_mb``, ``-timeout``), all targets at once, for
``EMBEDLOG_FUZZ_SECONDS`` (default 10) each, seeded with valid inputs built here. A target fails
on any exception other than embedlog's own, a wrong answer it checks, an out-of-memory or a
timeout.

The bomb tests feed every codec a stream that inflates far past the limit, and frames that lie
about their size, in a child process with a 1 GiB address-space limit: each must raise
CorruptBatchError while peak memory stays bounded.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from embedlog import checkpoint, producer_lane
from embedlog.records import TopicPartition
from embedlog.segment import _native
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression

from .workloads import scratch_dir

atheris = pytest.importorskip("atheris")

TARGETS = ("batch", "core", "varint", "index", "metadata", "codecs", "lane", "compaction")
if _native.CORE is None:  # the core targets exit at once without the compiled cores
    TARGETS = tuple(t for t in TARGETS if t not in ("core", "compaction"))
if producer_lane.LANE_IMPLEMENTATION != "c":  # nor the lane target without the compiled lane
    TARGETS = tuple(t for t in TARGETS if t != "lane")
SECONDS = int(os.environ.get("EMBEDLOG_FUZZ_SECONDS", "10"))
HERE = os.path.dirname(os.path.abspath(__file__))


def _batch_seeds() -> list[bytes]:
    out = []
    for codec in Compression:
        batch = fmt.encode_batch([b"value-%d" % i * 3 for i in range(4)],
                                 keys=[b"k%d" % i for i in range(4)],
                                 headers=[[("h", b"x")], None, [("a", None)], None],
                                 timestamps=1_000, compression=codec, base_offset=7)
        out += [b"\x00" + batch, b"\x01" + batch + batch]
    out.append(b"\x00" + fmt.encode_batch([None], keys=[b"k"], timestamps=5))
    return out


def _index_seeds() -> list[bytes]:
    entries = b"".join((i * 3).to_bytes(4, "big") + (i * 100).to_bytes(4, "big")
                       for i in range(1, 9))
    times = b"".join((1000 + i).to_bytes(8, "big") + (i * 3).to_bytes(4, "big")
                     for i in range(1, 9))
    size = (2000).to_bytes(2, "big")
    return [b"\x00" + size + entries, b"\x02" + size + entries + bytes(64),
            b"\x01" + size + times, b"\x03" + size + times + bytes(48)]


def _metadata_seeds() -> list[bytes]:
    ck = checkpoint.format_offsets({TopicPartition("t", 0): 5, TopicPartition("u", 3): 77})
    meta = (b'{"topics": {"t": {"config": {"segment.bytes": 1024}, "partitions": 2}}, '
            b'"version": 1}')
    manifest = b"embedlog-segments 1\n0 4096\n12 4000\n"
    return [b"\x00" + ck.encode(), b"\x01" + meta, b"\x02" + manifest]


def _codec_seeds() -> list[bytes]:
    from embedlog.segment.codecs import compress

    data = b"records " * 500
    return [bytes([c - 1]) + compress(c, data) for c in range(1, 5)]


def _core_seeds() -> list[bytes]:
    """The batch seeds and batches without headers (the Arrow sink's one-pass case)."""
    plain = [fmt.encode_batch([b"v%d" % i * i for i in range(5)], keys=[None, b"k", b"", None,
                                                                        b"key"],
                              timestamps=[9, 3, 7, 1, 2], compression=codec, base_offset=3)
             for codec in Compression]
    return _batch_seeds() + [b"\x00" + batch for batch in plain]


def _compaction_seeds() -> list[bytes]:
    """Runs of uncompressed batches: plain, with tombstones and null keys, with headers, with a
    delete horizon, LogAppendTime."""
    runs = []
    for mode in (0x00, 0x1D, 0x2A, 0x37):
        run, base = b"", 10
        for i in range(4):
            n = 3 + i
            raw = fmt.encode_batch(
                [None if (j + i) % 3 == 0 else b"v%d" % j for j in range(n)],
                keys=[None if j == 4 else b"k%d" % ((j * 7 + i) % 5) for j in range(n)],
                headers=[[("h", b"x")] if i == 2 and j == 1 else None for j in range(n)],
                timestamps=[1_700_000_000_000 + j for j in range(n)], base_offset=base,
                timestamp_type=1 if i == 3 else 0,
                delete_horizon_ms=1_700_000_000_000 + 86_400_000 if i == 1 else None)
            run += raw
            base += n
        runs.append(bytes([mode]) + run)
    return runs


SEEDS: dict[str, Callable[[], list[bytes]]] = {
    "batch": _batch_seeds,
    "core": _core_seeds,  # the compiled decoder (and Arrow sink) against the pure decoder
    "varint": lambda: [b"\x00\x02\x04\x80\x01", b"\x01\xff\xff\xff\xff\x0f", b"\x00" + b"\xff" * 9
                       + b"\x01"],
    "index": _index_seeds,
    "metadata": _metadata_seeds,
    "codecs": _codec_seeds,
    # the compiled producer lane against the pure one: programs of attach/arm/add/push steps
    "lane": lambda: [bytes(range(256)), bytes([1, 0, 0, 3, 3, 3, 5, 4]) * 40, b"\x00" * 64],
    "compaction": _compaction_seeds,  # the cleaner's compiled walks against decoded columns
}


def _start(target: str, work: str, seconds: int) -> subprocess.Popen[bytes]:
    corpus = os.path.join(work, target)
    os.makedirs(corpus)
    for i, seed in enumerate(SEEDS[target]()):
        with open(os.path.join(corpus, f"seed-{i}"), "wb") as f:
            f.write(seed)
    log = open(os.path.join(work, target + ".log"), "wb")  # noqa: SIM115 - closed by the OS
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "fuzz_targets", f"fuzz_{target}.py"),
         f"-max_total_time={seconds}", "-rss_limit_mb=1024", "-malloc_limit_mb=512",
         "-timeout=10", "-print_final_stats=1", f"-artifact_prefix={work}/{target}-", corpus],
        stdout=log, stderr=subprocess.STDOUT)


def run_targets(seconds: int) -> dict[str, tuple[int, int, str]]:
    """``{target: (exit status, executions, log tail)}``, every target in parallel."""
    work = scratch_dir()
    procs = {t: _start(t, work, seconds) for t in TARGETS}
    out = {}
    for target, proc in procs.items():
        status = proc.wait(timeout=seconds * 3 + 120)
        with open(os.path.join(work, target + ".log"), "rb") as f:
            text = f.read().decode(errors="replace")
        m = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
        out[target] = (status, int(m.group(1)) if m else 0, text[-3000:])
    return out


def test_fuzz_targets_smoke(request: pytest.FixtureRequest) -> None:
    """A few seconds each: the targets start, run and accept their seeds. Left out of a run
    that also runs the full fuzzing below, which checks the same and more (it is left out by
    ``-m "not slow"`` and by ``EMBEDLOG_QUICK=1``)."""
    quick = os.environ.get("EMBEDLOG_QUICK") == "1"
    if not quick and "not slow" not in str(request.config.getoption("markexpr", "")):
        pytest.skip("the full fuzzing runs in this session (test_fuzz_targets_full)")
    _check_targets(run_targets(3))


@pytest.mark.slow
def test_fuzz_targets_full() -> None:
    results = run_targets(SECONDS)
    print("\nfuzzing: " + ", ".join(f"{t} {e} execs" for t, (_, e, _) in results.items()))
    _check_targets(results)


def _check_targets(results: dict[str, tuple[int, int, str]]) -> None:
    """Every target exited cleanly after running at least one input."""
    failed = {t: tail for t, (status, _, tail) in results.items() if status != 0}
    assert failed == {}
    assert all(execs > 0 for _, execs, _ in results.values()), results


# ---------------------------------------------------------------------- bombs

BOMB_CHILD = textwrap.dedent(
    """
    import resource, sys, zlib
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from embedlog.errors import CorruptBatchError
    from embedlog.segment.codecs import decompress
    codec, path, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    data = open(path, "rb").read()
    try:
        decompress(codec, data, max_size=limit)
        print("ACCEPTED")
    except CorruptBatchError as exc:
        print("REJECTED", exc)
    # this process's own high-water mark: getrusage's ru_maxrss keeps the forking parent's
    # across exec, VmHWM belongs to the new address space
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
    print("PEAK", int(hwm[0].split()[1]) * 1024)
    """
)

LIMIT = 16 * 1024 * 1024
BOMB_BYTES = 256 * 1024 * 1024  # 16x the limit


def _zeros_stream(compressor: Callable[[bytes], bytes], finish: Callable[[], bytes]) -> bytes:
    chunk = bytes(1 << 20)
    return b"".join(compressor(chunk) for _ in range(BOMB_BYTES >> 20)) + finish()


def _gzip_bomb() -> bytes:
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return _zeros_stream(z.compress, z.flush)


def _zstd_bomb() -> bytes:
    import zstandard

    c = zstandard.ZstdCompressor().compressobj(size=BOMB_BYTES)
    return _zeros_stream(c.compress, c.flush)


def _lz4_bomb() -> bytes:
    import lz4.frame

    c = lz4.frame.LZ4FrameCompressor()
    head: bytes = c.begin(source_size=BOMB_BYTES)
    return head + _zeros_stream(c.compress, c.flush)


def _snappy_bomb() -> bytes:
    import cramjam

    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    framed = len(block).to_bytes(4, "big") + block
    head = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
    return head + framed * (BOMB_BYTES // (32 * 1024))


def _zstd_liar() -> bytes:
    """A 1-byte frame whose header claims 1 TiB of content."""
    import zstandard

    frame = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(b"x"))
    # Frame header descriptor: content-size flag 3 (8-byte field), single segment.
    fhd = frame[4]
    assert fhd >> 6 == 0  # the 1-byte size field of a tiny frame
    single = fhd & 0x20
    rest = frame[5 + (0 if single else 1) + 1 :]
    return bytes(frame[:4]) + bytes([0xC0 | single]) + (b"" if single else frame[5:6]) + (
        (1 << 40).to_bytes(8, "little")) + bytes(rest)


def _snappy_framed_liar() -> bytes:
    """xerial framing whose one block claims to be 2 GiB long."""
    head = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
    return head + (2**31 - 1).to_bytes(4, "big") + b"\x00" * 16


def _snappy_raw_liar() -> bytes:
    """A raw snappy block whose length preamble claims 4 GiB."""
    return b"\xff\xff\xff\xff\x0f" + b"\x00\x01" * 8


BOMBS: dict[str, tuple[int, Callable[[], bytes]]] = {
    "gzip-zeros": (Compression.GZIP, _gzip_bomb),
    "snappy-zeros": (Compression.SNAPPY, _snappy_bomb),
    "lz4-zeros": (Compression.LZ4, _lz4_bomb),
    "zstd-zeros": (Compression.ZSTD, _zstd_bomb),
    "zstd-lying-size": (Compression.ZSTD, _zstd_liar),
    "snappy-lying-block": (Compression.SNAPPY, _snappy_framed_liar),
    "snappy-lying-raw": (Compression.SNAPPY, _snappy_raw_liar),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_decompression_bomb_is_rejected_with_bounded_memory(name: str) -> None:
    codec, build = BOMBS[name]
    work = scratch_dir()
    path = os.path.join(work, "bomb")
    with open(path, "wb") as f:
        f.write(build())
    out = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(int(codec)), path, str(LIMIT)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("REJECTED"), out.stdout
    peak = int(out.stdout.split("PEAK")[1])
    size = os.path.getsize(path)
    assert peak <= 2 * LIMIT + 2 * size + 160 * 1024 * 1024, f"peak RSS {peak >> 20} MiB"
    os.unlink(path)


def test_fuzz_targets_leave_no_scratch_folders(tmp_path: pathlib.Path) -> None:
    """Importing and running the targets makes their scratch folders only when used, and
    removes them when the process ends."""
    scratch = str(tmp_path)
    code = textwrap.dedent("""
        import fuzz_index, fuzz_metadata, os, sys
        fuzz_index.test_one_input(b"\\x00\\x00\\x10" + bytes(16))
        fuzz_metadata.test_one_input(b"\\x02embedlog-segments 1\\n")
        print(len(os.listdir(sys.argv[1])))
    """)
    env = dict(os.environ, TMPDIR=scratch)
    run = subprocess.run([sys.executable, "-c", code, scratch],
                         cwd=os.path.join(HERE, "fuzz_targets"), env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == "2"         # both scratch folders existed while running
    assert os.listdir(scratch) == []             # and are gone after exit
