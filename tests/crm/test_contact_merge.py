"""Merging two records of one person (`crm.services.merge.contacts_merge`):
everything moves to the surviving contact in one transaction, one open lead
per need, the strictest consent, one automated path, one receipt."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.capture.base import Capture
from agents.capture.identity import capture_apply
from agents.followup.sequences.engine import enrollment_start
from crm.models import (
    Appointment,
    Business,
    Call,
    ConsentEvent,
    ConsentState,
    Contact,
    ContactPoint,
    Conversation,
    Enrollment,
    Estimate,
    Invoice,
    Job,
    KeptApartPair,
    Lead,
    LeadTouch,
    Message,
    Payment,
    Receipt,
    Sequence,
    ServiceLine,
    Stage,
    Task,
)
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.conversations import note_add
from crm.services.forget import contact_forget
from crm.services.merge import CONTACTS_MERGING, MergeError, contacts_keep_apart, contacts_merge
from crm.services.records import (
    appointment_record,
    estimate_record,
    invoice_record,
    job_record,
    lead_open,
    payment_record,
    task_create,
)
from tests.factories import ServiceLineFactory, lead_create
from tests.helpers.followup import playbook  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db

KEEP_PHONE, MERGED_PHONE, MERGED_EMAIL = "+12125550147", "+12125550199", "pat@example.com"


@dataclass
class People:
    keep: Contact
    merged: Contact
    hvac_kept: Lead  # the survivor's open HVAC lead (older)
    hvac_twin: Lead  # the merged contact's open HVAC lead: the same need
    plumbing: Lead  # the merged contact's open plumbing lead: another need


@pytest.fixture
def lines(business: Business) -> dict[str, ServiceLine]:
    return {
        "hvac": ServiceLineFactory.create(business=business, slug="hvac", name="HVAC"),
        "plumbing": ServiceLineFactory.create(business=business, slug="plumbing", name="Plumbing"),
    }


@pytest.fixture
def people(business: Business, lines: dict[str, ServiceLine]) -> People:
    hvac_kept = lead_create(business, first_name="Pat", last_name="", phone=KEEP_PHONE, service_line=lines["hvac"])
    hvac_twin = lead_create(
        business, first_name="", last_name="Doe", phone=MERGED_PHONE, email=MERGED_EMAIL, service_line=lines["hvac"]
    )
    merged = hvac_twin.contact
    plumbing = lead_open(contact=merged, actor="test", service_line=lines["plumbing"], touch={"channel": "form"})
    return People(hvac_kept.contact, merged, hvac_kept, hvac_twin, plumbing)


def texted(business: Business, phone: str, body: str, sid: str) -> Message:
    applied = capture_apply(
        business=business,
        capture=Capture(channel="sms", occurred_at=timezone.now(), phones=[phone], message_body=body, message_sid=sid),
    )
    assert applied.message is not None
    return applied.message


def merged_receipt(contact: Contact) -> Receipt:
    return Receipt.objects.get(action="contact.merged", subject=contact.public_id)


def test_every_record_of_the_merged_contact_moves_to_the_surviving_contact(business, people: People) -> None:
    twin, plumbing, now = people.hvac_twin, people.plumbing, timezone.now()
    # What hangs off the twin lead (the same need as the survivor's): it all moves to that lead.
    message = texted(business, MERGED_PHONE, "Is Tuesday ok?", "SM" + "1" * 32)
    assert message.lead == plumbing  # a reply joins the person's newest open lead
    twin_message = Message.objects.create(
        business=business, lead=twin, contact=people.merged, direction="in", status="received", body="hello"
    )
    task = task_create(lead=twin, title="Call back", due_at=now, actor="sam", kind="call_back")
    note = note_add(twin, author="sam", body="Prefers mornings.")
    call = Call.objects.create(
        business=business, lead=twin, contact=people.merged, direction="in", status="completed", started_at=now
    )
    tomorrow = now + timedelta(days=1)
    appointment = appointment_record(lead=twin, starts_at=tomorrow, ends_at=tomorrow + timedelta(hours=1), actor="sam")
    estimate = estimate_record(lead=twin, amount=Decimal("640.00"), currency="USD", actor="sam")
    job = job_record(lead=twin, actor="sam")
    invoice = invoice_record(lead=twin, amount=Decimal("640.00"), currency="USD", actor="sam")
    payment = payment_record(lead=twin, amount=Decimal("640.00"), currency="USD", actor="sam", received_at=now)
    twin_touch = twin.touches.get()
    phone_point = people.merged.points.get(value=MERGED_PHONE)
    grant = consent_record(contact_point=phone_point, channel="sms", granted=True, basis="form_disclosure", actor="t")
    # Someone merged into the merged contact earlier follows it.
    earlier = Contact.objects.create(business=business)
    Contact.objects.filter(pk=earlier.pk).update(merged_into=people.merged)

    result = contacts_merge(people.keep, people.merged, actor="mia", reason="same person")

    assert result is not None
    merged = Contact.objects.get(pk=people.merged.pk)
    assert merged.merged_into_id == people.keep.pk and not merged.points.exists()
    assert not Lead.objects.filter(contact=merged).exists()
    assert not Message.objects.filter(contact=merged).exists() and not Call.objects.filter(contact=merged).exists()
    assert Contact.objects.get(pk=earlier.pk).merged_into_id == people.keep.pk
    assert set(people.keep.points.values_list("value", flat=True)) == {KEEP_PHONE, MERGED_PHONE, MERGED_EMAIL}
    assert ConsentEvent.objects.get(pk=grant.pk).contact_point.contact_id == people.keep.pk  # the ledger rides along
    # The twin lead became one with the survivor's lead of that need: closed, its records moved.
    twin = Lead.objects.get(pk=twin.pk)
    kept = people.hvac_kept
    assert (twin.stage, twin.merged_into_id, twin.contact_id) == (Stage.LOST, kept.pk, people.keep.pk)
    assert twin.lost_reason == f"merged into {kept.public_id}: the same person and need"
    for record in (twin_touch, twin_message, task, note, call, appointment, estimate, job, invoice, payment):
        assert type(record).objects.get(pk=record.pk).lead_id == kept.pk, record
    # Its conversation is the survivor's now: the message the twin was waiting on waits there.
    assert Conversation.objects.get(lead=kept).awaiting_since == twin_message.created_at
    assert Conversation.objects.get(lead=twin).last_message_id is None
    assert Payment.objects.get(pk=payment.pk).contact_id == people.keep.pk
    assert kept.touches.count() == 2
    # The other need keeps its lead, with its history, on the surviving contact.
    plumbing = Lead.objects.get(pk=plumbing.pk)
    assert (plumbing.contact_id, plumbing.stage, plumbing.merged_into_id) == (people.keep.pk, Stage.NEW, None)
    assert Message.objects.get(pk=message.pk).lead_id == plumbing.pk
    # The survivor's blanks are filled from the merged record, nothing overwritten.
    keep = Contact.objects.get(pk=people.keep.pk)
    assert (keep.first_name, keep.last_name) == ("Pat", "Doe")


def test_the_one_receipt_lists_what_moved_by_kind_with_counts_and_ids(business, people: People) -> None:
    now = timezone.now()
    call = Call.objects.create(
        business=business, lead=people.plumbing, contact=people.merged, direction="out", status="done", started_at=now
    )
    task = task_create(lead=people.hvac_twin, title="Call back", due_at=now, actor="sam", kind="call_back")
    points = list(people.merged.points.order_by("pk"))

    result = contacts_merge(people.keep, people.merged, actor="mia", reason="same person", lead=people.hvac_twin)

    assert result is not None
    receipts = Receipt.objects.filter(action="contact.merged")
    assert receipts.count() == 1
    receipt = receipts.get()
    # Written on the lead the merge concerns, or the one that lead became.
    assert (receipt.subject, receipt.actor, receipt.lead_id) == (people.merged.public_id, "mia", people.hvac_kept.pk)
    moved = receipt.after["moved"]
    assert receipt.after["into"] == people.keep.public_id
    assert moved["contact_points"] == {"count": 2, "ids": [p.public_id for p in points]}
    assert moved["leads"]["ids"] == [people.hvac_twin.public_id, people.plumbing.public_id]
    assert moved["calls"] == {"count": 1, "ids": [call.public_id]}
    assert moved["tasks"]["ids"] == [task.public_id]
    assert moved["lead_touches"]["count"] == 1
    assert receipt.after["leads_merged"] == [{"closed": people.hvac_twin.public_id, "into": people.hvac_kept.public_id}]
    assert receipt.after["filled"] == ["last_name"]
    # Personal data goes to the erasable personal-data row, as every receipt's does.
    assert receipt.before == {"name": "Doe", "points": [MERGED_PHONE, MERGED_EMAIL]}
    assert receipt.sealed is not None and "Doe" not in str(receipt.sealed)
    assert result.moved == {kind: entry["ids"] for kind, entry in moved.items()}


def test_of_two_open_leads_for_one_need_the_one_further_along_survives(business, people: People, setter) -> None:
    # The merged contact's twin lead is booked; the survivor's older one is new.
    lead_sync.lead_assign(people.hvac_twin, setter, actor="test", reason="test")
    lead_sync.lead_transition(people.hvac_twin, Stage.BOOKED, actor="test", reason="booked")

    contacts_merge(people.keep, people.merged, actor="mia")

    twin, kept = Lead.objects.get(pk=people.hvac_twin.pk), Lead.objects.get(pk=people.hvac_kept.pk)
    assert (twin.stage, twin.contact_id, twin.merged_into_id) == (Stage.BOOKED, people.keep.pk, None)
    assert (kept.stage, kept.merged_into_id) == (Stage.LOST, twin.pk)
    assert Lead.objects.filter(contact=people.keep).exclude(stage__in=["lost"]).count() == 2


def test_the_duplicate_leads_open_next_action_is_canceled_not_moved(business, people: People) -> None:
    now = timezone.now()
    kept_action = task_create(lead=people.hvac_kept, title="First contact", due_at=now, actor="sam")
    twin_action = task_create(lead=people.hvac_twin, title="First contact", due_at=now, actor="sam")

    contacts_merge(people.keep, people.merged, actor="mia")

    assert Task.objects.get(pk=kept_action.pk).status == Task.Status.OPEN
    twin_action = Task.objects.get(pk=twin_action.pk)
    assert (twin_action.status, twin_action.lead_id) == (Task.Status.CANCELED, people.hvac_kept.pk)
    assert Task.objects.filter(lead=people.hvac_kept, kind="next_action", status="open").count() == 1


@pytest.mark.parametrize("stop_on", ["merged", "keep"])
def test_a_stop_on_either_record_wins_for_every_number_of_the_person(business, people: People, stop_on: str) -> None:
    keep_phone = people.keep.points.get(value=KEEP_PHONE)
    merged_phone = people.merged.points.get(value=MERGED_PHONE)
    stopped, other = (merged_phone, keep_phone) if stop_on == "merged" else (keep_phone, merged_phone)
    consent_record(contact_point=other, channel="sms", granted=True, basis="form_disclosure", actor="test")
    stop = consent_record(contact_point=stopped, channel="sms", granted=False, basis="keyword", actor="test")

    result = contacts_merge(people.keep, people.merged, actor="mia")

    assert result is not None
    state = ConsentState.objects.select_related("last_event").get(contact_point=other, channel="sms")
    assert state.status == "revoked"
    revocation = state.last_event
    assert (revocation.action, revocation.basis, revocation.actor) == ("revoke", "contact_merge", "mia")
    assert revocation.evidence == {
        "merged": people.merged.public_id,
        "into": people.keep.public_id,
        "revocation": stop.public_id,
        "revoked_point": stopped.public_id,
    }
    assert result.consent_revoked == [revocation.public_id]
    assert ConsentState.objects.get(contact_point=stopped, channel="sms").last_event_id == stop.pk  # untouched
    # Only the channel with a revocation: voice and email are as they were.
    assert not ConsentState.objects.filter(contact_point=other, channel="voice").exists()


def test_a_merge_never_grants_consent(business, people: People) -> None:
    merged_phone = people.merged.points.get(value=MERGED_PHONE)
    consent_record(contact_point=merged_phone, channel="sms", granted=True, basis="form_disclosure", actor="test")
    email = people.merged.points.get(value=MERGED_EMAIL)
    consent_record(contact_point=email, channel="email", granted=True, basis="form_disclosure", actor="test")
    grants = ConsentEvent.objects.filter(action="grant").count()

    contacts_merge(people.keep, people.merged, actor="mia")

    assert ConsentEvent.objects.filter(action="grant").count() == grants
    keep_phone = people.keep.points.get(value=KEEP_PHONE)
    assert not ConsentState.objects.filter(contact_point=keep_phone).exists()  # still unknown: nothing granted
    assert ConsentState.objects.get(contact_point=merged_phone, channel="sms").status == "granted"  # its own, kept


def test_a_paused_person_stays_paused_after_the_merge(business, people: People) -> None:
    Contact.objects.filter(pk=people.merged.pk).update(automation_paused=True, automation_paused_reason="complaint")

    contacts_merge(people.keep, people.merged, actor="mia")

    keep = Contact.objects.get(pk=people.keep.pk)
    assert (keep.automation_paused, keep.automation_paused_reason) == (True, "complaint")


def test_one_automated_path_runs_after_the_merge_the_better_priority_one(
    business,
    people: People,
    setter,
    playbook: dict[str, Sequence],  # noqa: F811 - the fixture
) -> None:
    # The survivor's lead runs the no-reply path (priority 100); the merged
    # contact's plumbing lead the open-estimate one (80, better).
    lead_sync.lead_assign(people.plumbing, setter, actor="test", reason="test")
    lead_sync.lead_transition(people.plumbing, Stage.QUALIFIED, actor="test", reason="test")
    no_reply = enrollment_start(people.hvac_kept, "no_reply", actor="test")
    open_estimate = enrollment_start(people.plumbing, "open_estimate", actor="test")
    assert no_reply is not None and open_estimate is not None
    assert (no_reply.status, open_estimate.status) == ("active", "active")  # one each, two people so far

    result = contacts_merge(people.keep, people.merged, actor="mia")

    assert result is not None and result.enrollments_stopped == [no_reply.public_id]
    no_reply, open_estimate = Enrollment.objects.get(pk=no_reply.pk), Enrollment.objects.get(pk=open_estimate.pk)
    assert (no_reply.status, no_reply.stop_reason) == ("stopped", "merged")
    assert (open_estimate.status, open_estimate.contact_id) == ("active", people.keep.pk)
    stopped = Receipt.objects.get(subject=no_reply.public_id, action="enrollment.stopped")
    assert (stopped.actor, stopped.reason) == ("mia", "merged")
    assert merged_receipt(people.merged).after["enrollments_stopped"] == [no_reply.public_id]


def test_the_duplicate_leads_path_ends_with_it(
    business,
    people: People,
    playbook: dict[str, Sequence],  # noqa: F811 - the fixture
) -> None:
    twin_path = enrollment_start(people.hvac_twin, "no_reply", actor="test")
    assert twin_path is not None and twin_path.status == "active"

    contacts_merge(people.keep, people.merged, actor="mia")

    twin_path = Enrollment.objects.get(pk=twin_path.pk)
    assert (twin_path.status, twin_path.stop_reason) == ("stopped", "stage_left")
    assert (twin_path.lead_id, twin_path.contact_id) == (people.hvac_twin.pk, people.keep.pk)


def test_merging_again_changes_nothing(business, people: People) -> None:
    assert contacts_merge(people.keep, people.merged, actor="mia") is not None
    receipts = Receipt.objects.count()

    assert contacts_merge(people.keep, people.merged, actor="max") is None
    assert Receipt.objects.count() == receipts


def test_a_contact_merged_elsewhere_or_of_another_business_is_refused(business, other_business, people: People) -> None:
    stranger = lead_create(other_business, phone="+12125550111").contact
    with pytest.raises(MergeError, match="different businesses"):
        contacts_merge(people.keep, stranger, actor="mia")
    third = lead_create(business, phone="+12125550122").contact
    contacts_merge(third, people.merged, actor="mia")
    with pytest.raises(MergeError, match="merged into another contact"):
        contacts_merge(people.keep, people.merged, actor="mia")
    assert Contact.objects.get(pk=people.merged.pk).merged_into_id == third.pk


def test_pairs_kept_apart_from_the_merged_contact_follow_it_to_the_survivor(business, people: People) -> None:
    someone = lead_create(business, phone="+12125550133").contact
    assert contacts_keep_apart(people.merged, someone, actor="mia") is True
    assert contacts_keep_apart(someone, people.merged, actor="mia") is False  # one pair, either order

    contacts_merge(people.keep, people.merged, actor="mia")

    low, high = sorted((people.keep.pk, someone.pk))
    assert list(KeptApartPair.objects.values_list("contact_low_id", "contact_high_id")) == [(low, high)]
    assert merged_receipt(people.merged).after["kept_apart_pairs"] == 1


def test_nothing_of_the_merge_is_written_when_it_fails(business, people: People) -> None:
    points = set(ContactPoint.objects.values_list("pk", "contact_id"))
    leads = set(Lead.objects.values_list("pk", "contact_id", "stage"))
    touches = set(LeadTouch.objects.values_list("pk", "lead_id"))

    def refuse(keep: Contact, merge: Contact, actor: str) -> list[str]:
        raise MergeError("refused for the test")

    with CONTACTS_MERGING.registered("refuse", refuse), pytest.raises(MergeError):
        contacts_merge(people.keep, people.merged, actor="mia")

    assert set(ContactPoint.objects.values_list("pk", "contact_id")) == points
    assert set(Lead.objects.values_list("pk", "contact_id", "stage")) == leads
    assert set(LeadTouch.objects.values_list("pk", "lead_id")) == touches
    assert Contact.objects.get(pk=people.merged.pk).merged_into_id is None
    assert not Receipt.objects.filter(action="contact.merged").exists()


def test_records_of_other_kinds_stay_attached_to_their_lead(business, people: People) -> None:
    now = timezone.now()
    appointment = appointment_record(
        lead=people.plumbing, starts_at=now + timedelta(days=2), ends_at=now + timedelta(days=2, hours=1), actor="sam"
    )
    estimate = estimate_record(lead=people.plumbing, amount=Decimal("90.00"), currency="USD", actor="sam")

    contacts_merge(people.keep, people.merged, actor="mia")

    assert Appointment.objects.get(pk=appointment.pk).lead_id == people.plumbing.pk
    assert Estimate.objects.get(pk=estimate.pk).lead_id == people.plumbing.pk
    assert not Job.objects.exists() and not Invoice.objects.exists()


def test_forgetting_a_merged_record_forgets_the_person_it_became(business, people: People) -> None:
    contacts_merge(people.keep, people.merged, actor="mia")

    result = contact_forget(Contact.objects.get(pk=people.merged.pk), actor="mia")

    assert result.contact.pk == people.keep.pk
    values = set(ContactPoint.objects.values_list("value", flat=True))
    assert not values & {KEEP_PHONE, MERGED_PHONE, MERGED_EMAIL}
    named = Contact.objects.filter(pk__in=[people.keep.pk, people.merged.pk]).exclude(first_name="", last_name="")
    assert not named.exists()
