"""The outbox: an event is written with its change (it exists exactly when
the change committed), from the one place that writes the change, and is
numbered after commit in the order events became visible."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.booking.no_show import no_show_record
from agents.followup.estimates import estimate_accept, estimate_send
from agents.followup.replies import reply_record
from agents.revenue.payments import payment_manual_record, refund_add
from crm.models import Business, OutboxEvent, Stage, TeamMember
from crm.services import lead_sync
from crm.services.outbox import OUTBOX_CONSUMERS, Sequenced, event_emit, outbox_sequence
from crm.services.receipts import receipts_batched
from crm.services.records import appointment_record, estimate_record
from tests.factories import lead_create

PERSONAL = ("Rosa", "Diaz", "5550147", "rosa@example.com", "42 Elm")


def types(**filters: object) -> list[str]:
    return list(OutboxEvent.objects.filter(**filters).order_by("id").values_list("type", flat=True))


@pytest.mark.django_db
def test_each_moment_is_told_once_by_the_service_that_writes_it(business: Business, setter: TeamMember) -> None:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", email="rosa@example.com")
    lead_sync.lead_assign(lead, setter, actor="sam", reason="round robin")
    reply_record(lead, channel="email", body="Yes, Tuesday works at 42 Elm", actor="sam")
    starts = timezone.now() - timedelta(hours=2)
    appointment = appointment_record(lead=lead, starts_at=starts, ends_at=starts + timedelta(hours=1), actor="sam")
    no_show_record(appointment, actor="sam")
    estimate = estimate_record(lead=lead, amount=Decimal("480.00"), currency="USD", actor="mia")
    estimate_send(estimate, actor="mia")
    estimate_accept(estimate, actor="mia")
    payment = payment_manual_record(
        lead=lead, amount=Decimal("480.00"), currency="USD", received_at=timezone.now(), actor="mia"
    )
    refund_add(payment, amount=Decimal("80.00"), actor="mia", reason="discount")

    assert types(lead=lead) == [
        "lead.created",
        "lead.owner_changed",
        "lead.stage_changed",
        "message.received",
        "appointment.booked",
        "appointment.no_show",
        "estimate.sent",
        "estimate.accepted",
        "payment.recorded",
        "refund.recorded",
    ]
    events = {e.type: e for e in OutboxEvent.objects.filter(lead=lead)}
    assert events["lead.stage_changed"].data == {
        "lead": lead.public_id,
        "from": "new",
        "to": "assigned",
        "actor": "sam",
    }
    assert events["lead.owner_changed"].data["to"] == "sam"
    assert events["payment.recorded"].data["amount"] == "480.00"  # money as a decimal string
    assert events["refund.recorded"].data == {
        "refund": events["refund.recorded"].subject,
        "payment": payment.public_id,
        "lead": lead.public_id,
        "amount": "80.00",
        "currency": "USD",
        "refunded_at": events["refund.recorded"].data["refunded_at"],
    }
    assert events["appointment.no_show"].subject == appointment.public_id
    text = str([e.data for e in events.values()])
    assert not [p for p in PERSONAL if p in text]


@pytest.mark.django_db(transaction=True)
def test_an_event_exists_exactly_when_its_change_committed(business: Business, setter: TeamMember) -> None:
    lead = lead_create(business)
    with pytest.raises(RuntimeError), transaction.atomic():
        lead_sync.lead_assign(lead, setter, actor="sam", reason="test")
        raise RuntimeError("the request failed after the change")
    assert types(lead=lead) == ["lead.created"]

    # A unit of work with batched receipts: a savepoint that rolls back takes its event with it.
    lead.refresh_from_db()
    with transaction.atomic(), receipts_batched():
        lead_sync.lead_assign(lead, setter, actor="sam", reason="test")
        try:
            with transaction.atomic():
                lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="test")
                raise RuntimeError("a step failed")
        except RuntimeError:
            pass
    assert types(lead=lead) == ["lead.created", "lead.owner_changed", "lead.stage_changed"]
    assert OutboxEvent.objects.filter(lead=lead, type="lead.stage_changed").get().data["to"] == "assigned"


@pytest.mark.django_db
def test_a_batched_unit_writes_its_events_in_its_receipts_one_insert(business: Business, setter: TeamMember) -> None:
    lead = lead_create(business)
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), receipts_batched():
        lead_sync.lead_assign(lead, setter, actor="sam", reason="test")
        lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="test")
    inserts = [q["sql"] for q in queries if "crm_outboxevent" in q["sql"]]
    assert len(inserts) == 1 and '"crm_receipt"' in inserts[0]
    assert types(lead=lead)[1:] == ["lead.owner_changed", "lead.stage_changed", "lead.stage_changed"]


@pytest.mark.django_db(transaction=True)
def test_events_are_numbered_in_the_order_they_became_visible(business: Business) -> None:
    """The first event written commits last: it is numbered after the one
    that committed first, never slipped in before a number already given,
    and a consumer meets each once, in that order."""
    told: list[list[str]] = []
    written, may_commit = threading.Event(), threading.Event()

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                event_emit(business=business, type="lead.created", subject="lead_A", data={"lead": "lead_A"})
                written.set()
                may_commit.wait(timeout=30)
        finally:
            connection.close()

    def consumer(business_id: int, events: list[Sequenced]) -> None:
        subjects = dict(OutboxEvent.objects.filter(pk__in=[e.id for e in events]).values_list("pk", "subject"))
        told.append([subjects[e.id] for e in events])

    with OUTBOX_CONSUMERS.registered("probe", consumer):
        writer = threading.Thread(target=slow_writer)
        writer.start()
        assert written.wait(timeout=30)
        event_emit(business=business, type="lead.created", subject="lead_B", data={"lead": "lead_B"})
        outbox_sequence(business.pk)  # A is written, not committed: only B is visible
        may_commit.set()
        writer.join(timeout=30)
        outbox_sequence(business.pk)
        outbox_sequence(business.pk)  # nothing new: nothing told twice

    a, b = OutboxEvent.objects.get(subject="lead_A"), OutboxEvent.objects.get(subject="lead_B")
    assert a.id < b.id and (b.seq, a.seq) == (1, 2)
    assert told == [["lead_B"], ["lead_A"]]
