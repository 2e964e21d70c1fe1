"""The fault drill (scripts/fault_drill.py) against the real cluster, the real
web server and the local Twilio-compatible server: a cluster killed with
SIGKILL mid-send (database broker and Redis), PostgreSQL restarted mid-burst
(a private server the drill starts, never the shared one) and a Twilio error
storm each end with every accepted delivery processed into one lead per
person, no text sent twice, nothing in flight past the sweeps' bound without
an exception item, and a receipt chain that verifies against the checkpoint
exported before the fault.

The four runs go at once, in one drill (each on its own copy of this run's
migrated test database, with its own servers): they spend most of their
time waiting for the sweeps' bound, so together they take about as long as
one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.database import test_database_url

ROOT = Path(__file__).resolve().parents[2]
# Marked so that pytest-django sets up (and migrates) the test database the
# drill copies; the tests themselves read only the drill's report.
pytestmark = pytest.mark.django_db
RUNS = ("kill9:orm", "kill9:redis", "pg-restart:orm", "storm:orm")


@pytest.fixture(scope="module")
def drill(django_db_setup: None) -> dict[str, dict[str, Any]]:
    seed = test_database_url()  # this run's migrated test database: copied, not migrated again
    done = subprocess.run(
        [sys.executable, "scripts/fault_drill.py", "--json", "--runs", ",".join(RUNS), "--seed-from", seed],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout.strip(), done.stderr[-5000:]
    reports = json.loads(done.stdout.strip().splitlines()[-1])
    return {f"{r['fault']}:{r['broker']}": r for r in reports}


def assert_clean(report: dict[str, Any]) -> None:
    detail = "\n".join(report["detail"])
    # The load really went through: every person accepted, a text to each.
    assert report["people"] == 12, detail
    assert report["accepted"] == 15, detail  # three of the twelve delivered twice
    assert sum(report["messages"].values()) >= 12, (report["messages"], detail)
    assert report["lost_events"] == 0, detail
    assert report["duplicate_sends"] == 0, detail
    assert report["stuck_without_exception_item"] == 0, detail
    assert report["chain_intact"], detail
    assert report["settled"], detail


@pytest.mark.parametrize("broker", ["orm", "redis"])
def test_a_cluster_killed_mid_send_loses_and_doubles_nothing(drill, broker):
    report = drill[f"kill9:{broker}"]
    assert_clean(report)
    # Killed mid-send: texts were at the provider, unanswered, when it died.
    assert any("killed the cluster with" in line and "0 at the provider" not in line for line in report["detail"])


def test_postgresql_restarted_mid_burst_loses_and_doubles_nothing(drill):
    report = drill["pg-restart:orm"]
    assert_clean(report)
    assert any("PostgreSQL restarted (immediate)" in line for line in report["detail"])


def test_a_twilio_error_storm_loses_and_doubles_nothing(drill):
    report = drill["storm:orm"]
    assert_clean(report)
    # Every kind of bad answer was given before the provider recovered.
    answers = report["provider_answers"]
    assert {k for k, v in answers.items() if v} >= {"5xx", "429", "timeout", "drop", "5xx-taken", "drop-taken", "ok"}
