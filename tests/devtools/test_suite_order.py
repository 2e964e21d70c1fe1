"""The suite's order under pytest-xdist names real files."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_started_first_exists() -> None:
    # A renamed or removed file would silently lose its place at the front.
    assert [path for path in SLOW_FIRST if not (ROOT / path).is_file()] == []
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
