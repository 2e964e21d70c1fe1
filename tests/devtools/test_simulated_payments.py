"""`simulate` with payments: signed Stripe payments and refunds over real HTTP
against the live server, linked to the simulated leads, and the revenue report
reconciling to the cent with payments minus refunds."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import Sum

from agents.orchestrator import orchestrate_pending
from crm.attribution import revenue_report
from crm.models import Business, Payment, Refund
from devtools.simulator.core import (
    BAD_SIGNATURE,
    SimContext,
    SourceInfo,
    context_load,
    plan_build,
    plan_run,
    unexpected,
)
from devtools.simulator.payments import PAYMENT, PAYMENT_PHASE, REFUND
from tests.helpers.revenue import SECRET
from tests.helpers.simulator import DEMO, process_received

NOW = datetime(2026, 3, 14, 15, 0, tzinfo=UTC)


def context(secret: str = SECRET) -> SimContext:
    source = SourceInfo("site", "website", "site-secret")
    return SimContext("acme-hvac", "Acme", "US", {"website": [source]}, stripe_webhook_secret=secret)


def test_payments_are_planned_only_when_the_server_can_verify_them():
    assert not [p for p in plan_build(context(""), leads=9, seed=3, now=NOW).posts if p.builder == "stripe"]
    skipped = plan_build(context(""), leads=3, seed=3, now=NOW, only=["website", "stripe"]).skipped
    assert "STRIPE_WEBHOOK_SECRET" in skipped["stripe"]
    plan = plan_build(context(), leads=9, seed=3, now=NOW)
    intents = Counter(p.intent for p in plan.posts if p.builder == "stripe")
    assert intents[PAYMENT] >= 2 and intents[REFUND] >= 1 and intents[BAD_SIGNATURE] == 1
    assert plan.builders[-1] == "stripe"


def test_adding_payments_changes_no_other_delivery_of_a_seed():
    with_payments = plan_build(context(), leads=9, seed=3, now=NOW)
    without = plan_build(context(""), leads=9, seed=3, now=NOW)
    assert [p.body for p in with_payments.posts if p.builder != "stripe"] == [p.body for p in without.posts]


@pytest.fixture
def acme(transactional_db, live_server, settings) -> Business:
    call_command("load_business", str(DEMO), stdout=StringIO())
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    return Business.objects.get(slug="acme-hvac")


def test_simulated_payments_link_to_the_simulated_leads_and_the_report_reconciles(acme, live_server):
    plan = plan_build(context_load("acme-hvac"), leads=9, seed=21, only=["website", "google_ads", "stripe"])
    leads_first = replace(plan, jobs=[j for j in plan.jobs if j.phase < PAYMENT_PHASE])
    money = replace(plan, jobs=[j for j in plan.jobs if j.phase >= PAYMENT_PHASE])
    assert money.jobs and unexpected(plan_run(leads_first, live_server.url)) == []
    process_received()  # the workers make the leads the payments will name
    results = plan_run(money, live_server.url)
    assert unexpected(results) == []
    assert process_received()["failed"] == 0
    orchestrate_pending()

    paid = [r for r in results if r.post.intent == PAYMENT]
    assert Payment.objects.count() == len({r.sent for r in paid if b"payment_intent.succeeded" in r.sent})
    assert not Payment.objects.exclude(match_status="matched").exists()  # each named its lead
    assert Refund.objects.exists()
    for payment in Payment.objects.all():
        assert sum(r.amount for r in payment.refunds.all()) <= payment.amount
    report = revenue_report([acme.pk], currency="USD")
    collected = Payment.objects.aggregate(t=Sum("amount"))["t"]
    refunded = Refund.objects.aggregate(t=Sum("amount"))["t"]
    assert (report.totals.collected, report.totals.refunded) == (collected, refunded)
    assert report.totals.net == collected - refunded and isinstance(report.totals.net, Decimal)
