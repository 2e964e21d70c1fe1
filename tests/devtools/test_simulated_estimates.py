"""`simulate` with estimates: visits booked through Calendly, marked held and
quoted through the estimate API with a team member's token, then accepted or
declined — real HTTP against the live server, whose stored events and queued
steps are run between phases the way the cluster would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
import requests
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.audit import lead_audit
from agents.followup.estimates import FOLLOW_UP_TIMER
from agents.orchestrator import orchestrate_pending
from approvals.models import ApprovalRequest
from crm.models import Appointment, Business, Enrollment, Estimate, Lead, Receipt, Stage, Timer
from crm.services.timers import timers_run_due
from devtools.simulator.bookings import BOOKING_PHASE
from devtools.simulator.core import (
    BAD_SIGNATURE,
    MALFORMED,
    SimContext,
    SourceInfo,
    context_load,
    plan_build,
    plan_run,
    summary_lines,
    unexpected,
)
from devtools.simulator.estimates import (
    ACCEPT,
    DECISION_PHASE,
    DECLINE,
    ESTIMATE,
    ESTIMATE_PHASE,
    HELD,
    HIGH_VALUE_AMOUNT,
    VISIT,
    VISIT_PHASE,
)
from tests.helpers.database import test_database_url
from tests.helpers.simulator import DEMO, process_received

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 14, 15, 0, tzinfo=UTC)
KEY = "sim-calendly-signing-key"
ONLY = ["website", "google_ads", "typeform", "calendly", "estimates"]


def context(token: str = "a-token") -> SimContext:
    sources = {
        "website": [SourceInfo("site", "website", "site-secret")],
        "calendly": [SourceInfo("cal", "calendly", KEY)],
    }
    return SimContext("acme-hvac", "Acme", "US", sources, api_token=token)


def test_estimates_are_planned_only_with_a_token_and_change_no_other_delivery():
    without = plan_build(context(""), leads=12, seed=3, now=NOW)
    assert not [p for p in without.posts if p.builder == "estimates"] and "estimates" not in without.builders
    skipped = plan_build(context(""), leads=3, seed=3, now=NOW, only=["website", "estimates"]).skipped
    assert "no API token" in skipped["estimates"]

    plan = plan_build(context(), leads=12, seed=3, now=NOW)
    intents = Counter(p.intent for p in plan.posts if p.builder == "estimates")
    assert intents[HELD] == intents[ESTIMATE] == 2 and intents[ACCEPT] == intents[DECLINE] == 1
    assert intents[MALFORMED] == intents[BAD_SIGNATURE] == 1
    visits = [p for p in plan.posts if p.intent == VISIT]
    assert len(visits) == 2 and {j.phase for j in plan.jobs if j.posts[0].builder == "estimates"} == {
        ESTIMATE_PHASE,
        DECISION_PHASE,
    }
    # Nobody gets a second booking or pays elsewhere in the plan.
    others = {p.person for p in plan.posts if p.builder in ("calendly", "stripe") and p.intent != VISIT}
    assert not others & {p.person for p in visits}
    assert [p.body for p in plan.posts if p.builder not in ("estimates",) and p.intent != VISIT] == [
        p.body for p in without.posts
    ]


@pytest.fixture
def acme(transactional_db, live_server, settings) -> Business:
    call_command("load_business", str(DEMO), stdout=StringIO())
    settings.CALENDLY_SIGNING_KEY = KEY
    return Business.objects.get(slug="acme-hvac")


def test_simulated_estimates_take_held_visits_to_a_decision_through_the_api(acme, live_server):
    olivia = Token.objects.create(user=acme.team.get(role="owner").user)
    ctx = context_load("acme-hvac", api_token=olivia.key)
    plan = plan_build(ctx, leads=18, seed=21, only=ONLY, api_wait=5)
    results = []
    for start, end in (
        (0, BOOKING_PHASE),
        (BOOKING_PHASE, VISIT_PHASE),
        (VISIT_PHASE, ESTIMATE_PHASE),
        (ESTIMATE_PHASE, DECISION_PHASE),
        (DECISION_PHASE, 99),
    ):
        part = replace(plan, jobs=[j for j in plan.jobs if start <= j.phase < end])
        got = plan_run(part, live_server.url)
        assert unexpected(got) == [], "\n".join(summary_lines(part, got))
        results.extend(got)
        assert process_received()["failed"] == 0  # the workers: leads, bookings, visits
        orchestrate_pending()

    posted = Counter(r.post.intent for r in results if r.post.builder == "estimates")
    assert posted[HELD] == posted[ESTIMATE] == 3 and posted[ACCEPT] == posted[DECLINE] == 1
    report = "\n".join(summary_lines(plan, results))
    assert "Estimates (API): 3 visits held, 3 estimates" in report and "1 accepted, 1 declined" in report

    estimates = list(Estimate.objects.select_related("lead__service_line").order_by("created_at"))
    assert len(estimates) == 3  # the negative amount was refused, the forged token too
    for estimate in estimates:
        lead = estimate.lead
        held = Appointment.objects.get(lead=lead, status="held")
        assert held.provider == "calendly" and held.outcome_at is not None
        assert Receipt.objects.filter(subject=held.public_id, action="appointment.held", actor="olivia").exists()
        assert Receipt.objects.filter(subject=estimate.public_id, action="estimate.recorded", actor="olivia").exists()
        line = lead.service_line
        if estimate.amount == Decimal(HIGH_VALUE_AMOUNT) and line and line.high_value_amount is not None:
            # Above the line's high value: waiting for a manager; the owner proposed it.
            assert estimate.status == "pending_approval" and lead.stage == Stage.APPOINTMENT_HELD
            assert ApprovalRequest.objects.get(kind="high_value_estimate", lead=lead).proposed_by == "olivia"
            continue
        assert estimate.sent_at is not None
        want = {"accepted": Stage.WON, "declined": Stage.LOST, "sent": Stage.ESTIMATE_SENT}[estimate.status]
        assert lead.stage == want, (estimate.public_id, estimate.status, lead.stage)
    # This seed quotes 12,500 on a plumbing lead (high value 5,000): it waits.
    assert Counter(e.status for e in estimates) == {"accepted": 1, "declined": 1, "pending_approval": 1}

    # The manager approves it over the API; then it is sent and the lead moves on.
    waiting = next(e for e in estimates if e.status == "pending_approval")
    request = ApprovalRequest.objects.get(kind="high_value_estimate", lead=waiting.lead)
    mia = Token.objects.create(user=acme.team.get(role="manager").user)
    approved = requests.post(
        f"{live_server.url}/api/v1/approvals/{request.public_id}/approve/",
        json={"note": "price checked"},
        headers={"Authorization": f"Token {mia.key}"},
        timeout=30,
    )
    assert approved.status_code == 200, approved.text
    orchestrate_pending()
    waiting.refresh_from_db()
    waiting.lead.refresh_from_db()
    assert waiting.status == "sent" and waiting.lead.stage == Stage.ESTIMATE_SENT
    estimates = list(Estimate.objects.order_by("created_at"))

    # Days later: the estimate still open starts the demo's open_estimate
    # path; the decided ones have no follow-up left to run.
    later = timezone.now() + timedelta(days=4)
    timers_run_due(now=later, kinds=[FOLLOW_UP_TIMER])
    for estimate in estimates:
        paths = Enrollment.objects.filter(lead=estimate.lead, sequence__key="open_estimate")
        if estimate.status == "sent":
            assert paths.get().status == "active"
            assert Timer.objects.filter(lead=estimate.lead, kind="sequence.step", status="pending").exists()
        else:
            assert not paths.exists(), estimate.status
    assert not Timer.objects.filter(
        kind=FOLLOW_UP_TIMER, status="pending", lead__in=Lead.objects.filter(stage__in=[Stage.WON, Stage.LOST])
    ).exists()


def test_make_simulate_against_the_real_cluster_moves_estimates_and_keeps_the_stop_rules(acme, live_server):
    """What `make run` + `make simulate` do: the command over HTTP with the
    owner's token, the real django-q2 cluster processing what arrives (the
    estimate posts wait on the read API for the leads and visits it makes)."""
    token = Token.objects.create(user=acme.team.get(role="owner").user)
    env = {**os.environ, "DATABASE_URL": test_database_url(), "Q_WORKERS": "1"}
    cluster = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out = StringIO()
    try:
        call_command(
            "simulate",
            "--url",
            live_server.url,
            "--leads",
            "12",
            "--seed",
            "8",
            "--only",
            "website,google_ads,calendly,estimates",
            "--token",
            token.key,
            "--api-wait",
            "120",
            stdout=out,
        )
        decided = Estimate.objects.filter(status__in=["accepted", "declined"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the cluster runs the decisions' steps
            stages = set(decided.values_list("status", "lead__stage"))
            if decided.count() == 2 and stages == {("accepted", Stage.WON), ("declined", Stage.LOST)}:
                break
            time.sleep(0.5)
    finally:
        os.killpg(cluster.pid, signal.SIGTERM)
        try:
            cluster.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.communicate()
    report = out.getvalue()
    assert "Every status was the expected one." in report, report
    assert "Estimates (API): 2 visits held, 2 estimates" in report and "1 accepted, 1 declined" in report, report
    assert set(decided.values_list("status", "lead__stage")) == {("accepted", Stage.WON), ("declined", Stage.LOST)}
    for estimate in Estimate.objects.all():
        assert Appointment.objects.filter(lead=estimate.lead, status="held", provider="calendly").exists()
        actions = set(Receipt.objects.filter(subject=estimate.public_id).values_list("action", flat=True))
        assert {"estimate.recorded", "estimate.sent", f"estimate.{estimate.status}"} <= actions

    audit = lead_audit(acme)
    assert [v for v in audit.violations if v.check == "stop_rule"] == []


def test_an_estimate_whose_visit_never_appeared_says_the_cluster_may_be_down():
    """Against a server whose cluster is not running, no booking is processed,
    the held post finds no visit, and the estimate after it must say so: it
    crashed the run with KeyError: 'lead'."""
    from devtools.simulator.base import PostNotReady

    plan = plan_build(context(), leads=12, seed=3, now=NOW)
    estimate = next(p for p in plan.posts if p.intent == ESTIMATE)
    assert estimate.route is not None
    with pytest.raises(PostNotReady, match="is the task cluster running"):
        estimate.route("http://127.0.0.1:9")
