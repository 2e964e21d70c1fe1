"""`simulate` with bookings: signed Calendly bookings, cancellations and
no-shows over real HTTP against the live server, matched to the simulated
leads (and the one from a stranger handed to a person)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from agents.capture.providers.calendly import signature_problem
from agents.orchestrator import orchestrate_pending
from crm.models import Appointment, Business, ExceptionItem, Lead, Stage, Task
from devtools.simulator.bookings import BOOKING, BOOKING_PHASE, CANCELLATION, NO_SHOW, OUTCOME_PHASE, UNMATCHED
from devtools.simulator.core import (
    BAD_SIGNATURE,
    DUPLICATE,
    SimContext,
    SourceInfo,
    context_load,
    plan_build,
    plan_run,
    summary_lines,
    unexpected,
)
from tests.helpers.simulator import DEMO, process_received

NOW = datetime(2026, 3, 14, 15, 0, tzinfo=UTC)
KEY = "sim-calendly-signing-key"


def context(key: str = KEY) -> SimContext:
    return SimContext(
        "acme-hvac",
        "Acme",
        "US",
        {"website": [SourceInfo("site", "website", "site-secret")], "calendly": [SourceInfo("cal", "calendly", key)]},
    )


def test_bookings_are_planned_only_when_the_server_can_verify_them(settings):
    settings.CALENDLY_SIGNING_KEY = ""
    assert not [p for p in plan_build(context(""), leads=12, seed=3, now=NOW).posts if p.builder == "calendly"]
    skipped = plan_build(context(""), leads=3, seed=3, now=NOW, only=["website", "calendly"]).skipped
    assert "CALENDLY_SIGNING_KEY is not set" in skipped["calendly"]
    settings.CALENDLY_SIGNING_KEY = KEY  # the server's setting stands in for a source secret
    assert [p for p in plan_build(context(""), leads=12, seed=3, now=NOW).posts if p.builder == "calendly"]


def test_a_plan_holds_bookings_outcomes_a_stranger_a_repeat_and_a_forgery_signed_as_calendly_signs():
    plan = plan_build(context(), leads=12, seed=3, now=NOW)
    posts = [p for p in plan.posts if p.builder == "calendly"]
    intents = Counter(p.intent for p in posts)
    assert intents[BOOKING] == 3 and intents[CANCELLATION] == 1 and intents[NO_SHOW] == 1
    assert intents[UNMATCHED] == 1 and intents[DUPLICATE] == 1 and intents[BAD_SIGNATURE] == 1
    assert plan.builders[-1] == "calendly"
    for post in posts:
        # Bookings that carry the lead id read it from the database when sent; the others sign here.
        if post.prepare is not None and post.intent != BOOKING:
            body, headers = post.prepare()
            assert signature_problem(headers["Calendly-Webhook-Signature"], body, KEY) == ""
        elif post.intent == BAD_SIGNATURE:
            assert "does not match" in signature_problem(
                post.headers["Calendly-Webhook-Signature"], post.body, KEY, now=NOW.timestamp()
            )


def test_adding_bookings_changes_no_other_delivery_of_a_seed():
    with_bookings = plan_build(context(), leads=12, seed=3, now=NOW)
    without = plan_build(context(""), leads=12, seed=3, now=NOW)
    assert [p.body for p in with_bookings.posts if p.builder != "calendly"] == [p.body for p in without.posts]


@pytest.fixture
def acme(transactional_db, live_server, settings) -> Business:
    call_command("load_business", str(DEMO), stdout=StringIO())
    settings.CALENDLY_SIGNING_KEY = KEY
    return Business.objects.get(slug="acme-hvac")


def test_simulated_bookings_book_cancel_and_miss_the_simulated_leads(acme, live_server):
    plan = plan_build(context_load("acme-hvac"), leads=12, seed=21, only=["website", "google_ads", "calendly"])
    for phases in ((0, BOOKING_PHASE), (BOOKING_PHASE, OUTCOME_PHASE), (OUTCOME_PHASE, 99)):
        part = replace(plan, jobs=[j for j in plan.jobs if phases[0] <= j.phase < phases[1]])
        results = plan_run(part, live_server.url)
        assert unexpected(results) == [], "\n".join(summary_lines(part, results))
        assert process_received()["failed"] == 0  # the workers: leads first, then their bookings
    orchestrate_pending()

    intents = Counter(p.intent for p in plan.posts if p.builder == "calendly")
    calendly = Appointment.objects.filter(provider="calendly")
    assert calendly.count() == intents[BOOKING]
    assert calendly.filter(status="canceled").count() == intents[CANCELLATION]
    assert calendly.filter(status="no_show").count() == intents[NO_SHOW]
    no_show = calendly.get(status="no_show")
    assert Lead.objects.get(pk=no_show.lead_id).stage == Stage.NO_SHOW
    booked = calendly.filter(status="scheduled")
    assert booked.exists() and all(a.lead.stage == Stage.BOOKED for a in booked)
    stranger = ExceptionItem.objects.get(kind="booking_unmatched")
    assert stranger.owner.role == "manager" and "no contact has this email or phone" in stranger.detail
    task = Task.objects.get(kind="exception", title__endswith=f"({stranger.subject})")
    assert task.title.startswith("Calendly booking matches no lead: Walk In <walk.in.") and task.owner == stranger.owner
