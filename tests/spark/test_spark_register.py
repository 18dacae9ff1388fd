"""``embedlog.spark.register`` registers the source only when the session lacks it (no Spark
session needed: the session is a stand-in with the two handles register uses)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import embedlog.spark


class _Manager:
    def __init__(self, known: set[str] | None) -> None:
        self.known = known

    def dataSourceExists(self, name: str) -> bool:
        if self.known is None:
            raise RuntimeError("no JVM")
        return name in self.known


class _Session:
    def __init__(self, known: set[str] | None) -> None:
        self.registered: list[Any] = []
        manager = _Manager(known)
        state = type("State", (), {"dataSourceManager": lambda _self: manager})()
        self._jsparkSession = type("J", (), {"sessionState": lambda _self: state})()
        self.dataSource = type("DS", (), {"register": lambda _s, cls: self.registered.append(
            cls)})()


@pytest.mark.parametrize(("known", "registers"), [({"embedlog"}, False), (set(), True),
                                                  (None, True)])
def test_register_only_when_needed(known: set[str] | None, registers: bool) -> None:
    session = _Session(known)
    assert embedlog.spark.register(session) is registers
    assert session.registered == ([embedlog.spark.EmbedlogDataSource] if registers else [])
