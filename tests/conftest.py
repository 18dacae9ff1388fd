"""Shared fixtures: temporary log directories and the real Kafka fixtures."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

import embedlog
from helpers import KAFKA_FIXTURES


@pytest.fixture
def log_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "log"


@pytest.fixture
def log(log_dir: pathlib.Path) -> Iterator[embedlog.Log]:
    with embedlog.open(log_dir) as opened:
        yield opened


@pytest.fixture
def kafka_fixtures() -> pathlib.Path:
    if not KAFKA_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/kafka-real is not present")
    return KAFKA_FIXTURES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # EMBEDLOG_QUICK=1 skips the long reliability and Spark suites in local runs; CI runs all.
    if os.environ.get("EMBEDLOG_QUICK") != "1":
        return
    skip = pytest.mark.skip(reason="EMBEDLOG_QUICK=1")
    for item in items:
        if "slow" in item.keywords or "spark" in item.keywords:
            item.add_marker(skip)
