"""The README and docs/ say what the code does: every Python and shell example in the README
runs, every CLI command is documented in docs/cli.md (which matches ``--help``), and the format
page's batch header table and file names match the codec and :mod:`embedlog.naming`."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import struct
import subprocess
import sys

import pytest

import embedlog
from embedlog import naming
from embedlog.cli.reference import command_paths, render
from embedlog.segment import format as fmt

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_DOC = ROOT / "docs" / "cli.md"
FORMAT_DOC = ROOT / "docs" / "format.md"
QUICK_START = ['pip install -e ".[spark,dev]" && embedlog demo', "pytest"]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in _FENCE.findall(README) if lang == language]


def python_blocks(*, spark: bool) -> list[str]:
    return [b for b in blocks("python") if ("spark" in b) == spark]


def shell_env(tmp_path: pathlib.Path) -> dict[str, str]:
    """The environment of a user's shell: this interpreter's scripts (``embedlog``) first."""
    env = {k: v for k, v in os.environ.items() if k != "EMBEDLOG_DIR"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def test_quick_start_is_exactly_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [block] = [body for lang, body in _FENCE.findall(quick) if lang == "bash"]
    assert block.strip().splitlines() == QUICK_START


def test_python_examples_run(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """Every non-Spark Python block, in order, in one namespace, in a fresh folder."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    examples = python_blocks(spark=False)
    assert len(examples) >= 5
    for i, code in enumerate(examples):
        exec(compile(code, f"README.md python block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "events 0 0" in out
    assert "{b'ann': b'ann v2', b'bob': b'bob v2', b'eve': None}" in out
    assert "['audit', 'events', 'profiles']" in out
    assert "[('user-0', 100, 990), ('user-1', 100, 991), ('user-2', 100, 992)]" in out  # DuckDB
    assert "[b'book', b'lamp', b'pen']" in out  # the asyncio service
    assert "tiered 0 500" in out  # read back across the local/remote boundary


@pytest.mark.spark
def test_spark_example_runs(tmp_path: pathlib.Path) -> None:
    """The Spark block after the others (it reads their log), in its own process so its
    session does not meet the test suite's."""
    pytest.importorskip("pyspark")
    script = "\n".join(python_blocks(spark=False) + python_blocks(spark=True))
    env = shell_env(tmp_path)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout[done.stdout.index("|partition|"):]
    rows = [line.split("|")[1:4] for line in table.splitlines()[2:] if line.startswith("|")]
    assert sum(int(records) for _, records, _ in rows) == 1004 - 2  # two deleted records


def test_shell_examples_run(tmp_path: pathlib.Path) -> None:
    """Every shell block but the quick start, with bash -e, in a fresh folder."""
    scripts = [b for b in blocks("bash") if b.strip().splitlines() != QUICK_START]
    assert scripts
    for script in scripts:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                              env=shell_env(tmp_path), capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, (script, done.stdout[-2000:], done.stderr[-2000:])
    assert (tmp_path / "cli-demo" / "orders-0").is_dir()


def _readme_commands() -> set[str]:
    """``embedlog <command> [<subcommand>]`` as used in the README."""
    paths = set(command_paths())
    used = set()
    for line in re.findall(r"(?:^|`|\| |&& )(embedlog(?: [a-z-]+){1,2})", README, re.M):
        words = shlex.split(line)
        for n in (3, 2):
            if " ".join(words[:n]) in paths:
                used.add(" ".join(words[:n]))
                break
        else:
            raise AssertionError(f"the README uses an unknown command: {line}")
    return used


def test_readme_commands_exist_and_every_command_is_documented() -> None:
    used = _readme_commands()
    assert {"embedlog demo", "embedlog verify", "embedlog dump-log", "embedlog produce"} <= used
    reference = CLI_DOC.read_text(encoding="utf-8")
    for path in command_paths():
        assert f"## `{path}`" in reference, f"{path} is missing from docs/cli.md"


def test_cli_reference_matches_help() -> None:
    assert CLI_DOC.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: python -m embedlog.cli.reference > docs/cli.md"
    )


def test_format_page_matches_the_codec() -> None:
    text = FORMAT_DOC.read_text(encoding="utf-8")
    section = text.split("## Record batch", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [r[3] for r in rows] == [name for name, _ in fmt.FIELDS]
    sizes = [struct.calcsize(">" + code) for _, code in fmt.FIELDS]
    assert [int(r[1]) for r in rows] == sizes
    assert [int(r[0]) for r in rows] == [sum(sizes[:i]) for i in range(len(sizes))]


def test_docs_links_resolve() -> None:
    targets = re.findall(r"\]\((docs/[^)#]+)\)", README)
    assert targets
    for target in targets:
        assert (ROOT / target).is_file(), target


def _documented_names() -> set[str]:
    """File and folder names of the format page's layout blocks and its suffix table."""
    text = FORMAT_DOC.read_text(encoding="utf-8")
    names: set[str] = set()
    for lang, body in _FENCE.findall(text):
        if lang != "text" or "<" not in body.split("\n", 1)[0]:
            continue  # only the directory trees (they start with <log dir>/ or a path)
        for line in body.splitlines()[1:]:
            path = re.split(r"\s{2,}", line.strip())[0] if line.strip() else "..."
            for part in path.strip("/").split("/"):
                if part == "..." or (part.startswith("<") and part.endswith(">")):
                    continue
                m = re.fullmatch(r"\d{20}(\.\w+)", part)
                names.add(m.group(1) if m else part)
    names.update(re.findall(r"^\| `(\.\w+)` \|", text, re.M))
    return names


def test_format_page_lists_the_names_of_naming_py() -> None:
    constants = {
        name: getattr(naming, name) for name in naming.__all__
        if name.isupper() and isinstance(getattr(naming, name), str)
    }
    assert len(constants) >= 25
    documented = _documented_names()
    missing = {k: v for k, v in constants.items() if v not in documented}
    assert not missing, f"docs/format.md does not list {missing}"
    unknown = documented - set(constants.values())
    assert not unknown, f"docs/format.md lists names naming.py does not define: {unknown}"


def test_every_export_is_documented() -> None:
    """docs/api.md names every exported type and function (exceptions as a tree), and each has
    a docstring of its own."""
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    names = [n for n in embedlog.__all__ if n != "__version__"]
    assert {"RecordBatch", "SegmentInfo", "CompactionStats", "inspect"} <= set(names)
    undocumented = [n for n in names if not n.endswith("Error") and f"`{n}`" not in api]
    assert not undocumented, f"docs/api.md does not mention {undocumented}"
    no_docstring = [n for n in names if isinstance(getattr(embedlog, n), type)
                    and not getattr(embedlog, n).__dict__.get("__doc__")]
    assert not no_docstring, f"exported without a docstring: {no_docstring}"
