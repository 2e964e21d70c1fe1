"""The receipt chain under real concurrency: no deadlock, no lost receipt.

Every path that writes receipts runs at once, for one business: a simulated
day of traffic (forms, ads, Typeform, Meta and Instagram leads and replies,
Twilio calls and texts, Calendly bookings, Stripe payments, estimates through
the API) posted by eight threads to the live server, while three worker
threads process what arrives the way the cluster does (inbound events,
orchestrator steps and every other timer) and a manager decides the
approvals they open. Receipts are inserted in those transactions and sealed
after each commit, so nothing here may wait on a business-wide lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from rest_framework.authtoken.models import Token

from agents.capture.processing import event_process
from approvals.models import ApprovalRequest
from approvals.services import ApprovalNotPending, SelfApproval, approval_approve
from crm.models import Appointment, Business, Estimate, InboundEvent, Lead, Receipt
from crm.services.receipts import receipts_verify
from crm.services.timers import timers_run_due
from devtools.simulator.core import GraphServer, context_load, plan_build, plan_run, summary_lines, unexpected
from devtools.simulator.marketplace_api import MarketplaceServer, marketplaces_running
from devtools.simulator.marketplaces import yelp_publish
from tests.helpers.simulator import DEMO, HOSTED_FORM_FILE

META_SECRET = "stress-meta-app-secret"
TWILIO_TOKEN = "stress-twilio-auth-token"
CALENDLY_KEY = "stress-calendly-signing-key"


@pytest.fixture
def acme(
    transactional_db: None, live_server, settings, tmp_path: Path
) -> Iterator[tuple[Business, GraphServer, str, MarketplaceServer]]:
    call_command("load_business", str(DEMO), stdout=StringIO())
    extra = tmp_path / "hosted.yaml"
    extra.write_text(HOSTED_FORM_FILE)
    call_command("load_business", str(extra), stdout=StringIO())
    cache.clear()
    settings.PUBLIC_BASE_URL = live_server.url
    settings.META_APP_SECRET = META_SECRET
    settings.TWILIO_AUTH_TOKEN = TWILIO_TOKEN
    settings.CALENDLY_SIGNING_KEY = CALENDLY_KEY
    settings.META_GRAPH_ATTEMPTS = 1
    # Meta's Graph and the marketplaces' APIs (Yelp's leads are read back from it).
    with GraphServer() as graph, marketplaces_running(settings) as marketplaces:
        settings.META_GRAPH_URL = graph.url
        yield Business.objects.get(slug="acme-hvac"), graph, live_server.url, marketplaces


class Workers:
    """Threads that do the cluster's work until told to stop, then drain."""

    def __init__(self, business: Business, count: int) -> None:
        self.manager = business.team.get(role="manager").user
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.outcomes: Counter[str] = Counter()
        self.threads = [threading.Thread(target=self._guard(self._work), name=f"worker-{n}") for n in range(count)]

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
            finally:
                connection.close()

        return run

    def _round(self) -> int:
        done = 0
        received = InboundEvent.objects.filter(status="received").order_by("pk").values_list("pk", flat=True)
        for pk in list(received):
            outcome = event_process(pk)
            self.outcomes[outcome] += 1
            done += outcome != "skipped"
        done += timers_run_due().claimed
        for request in ApprovalRequest.objects.filter(status="pending"):
            try:
                approval_approve(request, user=self.manager, note="checked")
                done += 1
            except (ApprovalNotPending, SelfApproval):  # another worker decided it first, or the manager proposed it
                pass
        return done

    def _work(self) -> None:
        while not self.stop.is_set():
            if not self._round():
                self.stop.wait(0.2)
        while self._round():  # drain what the last posts left
            pass

    def __enter__(self) -> Workers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


def test_every_receipt_writing_path_at_once_seals_one_whole_chain_without_deadlock(acme) -> None:
    business, graph, url, marketplaces = acme
    owner = Token.objects.create(user=business.team.get(role="owner").user)
    ctx = context_load("acme-hvac", api_token=owner.key)
    plan = plan_build(ctx, leads=24, seed=113, api_wait=60)
    graph.publish(plan.graph_leads, plan.graph_tokens)
    yelp_publish(marketplaces, plan)

    with Workers(business, count=3) as workers:
        results = plan_run(plan, url, concurrency=8)
    assert not any(thread.is_alive() for thread in workers.threads)

    assert workers.errors == []
    assert unexpected(results) == [], "\n".join(summary_lines(plan, results))
    failed = InboundEvent.objects.filter(status="failed").exclude(error__startswith="malformed payload")
    assert list(failed.values_list("provider", "kind", "error")) == []
    assert not InboundEvent.objects.filter(error__icontains="deadlock").exists()

    # No receipt lost: each record the traffic made has its receipts, and
    # every receipt was sealed by the after-commit seal of its transaction
    # (the periodic sealer never ran here).
    assert Lead.objects.filter(business=business).count() >= 20
    for lead in Lead.objects.filter(business=business):
        assert lead.receipts.exists(), lead.public_id
    for appointment in Appointment.objects.filter(business=business):
        assert Receipt.objects.filter(subject=appointment.public_id).exists(), appointment.public_id
    for estimate in Estimate.objects.filter(business=business):
        assert Receipt.objects.filter(subject=estimate.public_id, action="estimate.recorded").exists()
    assert not Receipt.objects.filter(seq__isnull=True).exists()
    receipts = Receipt.objects.filter(business=business)
    assert list(receipts.order_by("seq").values_list("seq", flat=True)) == list(range(1, receipts.count() + 1))
    assert receipts.values("action").distinct().count() >= 15
    assert receipts_verify() is None
