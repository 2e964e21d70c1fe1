"""A person's decision resumes (or cancels) what waited on it."""

from __future__ import annotations

from datetime import time

import pytest

from agents.consent.keywords import revocation_ask
from agents.outbound.gate import message_send
from agents.outbound.keyword_replies import inbound_text_apply
from approvals.models import ApprovalRequest
from approvals.services import ApprovalConflict, approval_approve, approval_edit, approval_reject, approval_request_open
from crm.models import ConsentState, Contact, Lead, Message, Receipt, Role
from crm.services.consent import consent_record
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def lead(business):
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time(23, 59, 59)  # any hour will do
    business.save()
    lead = lead_create(business, phone="+12125550147")
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    return lead


@pytest.fixture
def boss(business):
    return member_create(business, Role.MANAGER, username="mia")


def inbound(lead: Lead, body: str) -> Message:
    text = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        contact_point=lead.contact.points.get(),
        channel="sms",
        status="received",
        body=body,
    )
    inbound_text_apply(message=text, lead=lead)
    return text


def test_an_approved_edited_draft_goes_out_with_the_edit(lead, boss):
    draft = message_send(
        lead=lead,
        channel="sms",
        body="It's $199.",
        actor="sam",
        idempotency_key="d1",
        automated=False,
        needs_approval=True,
    )
    request = ApprovalRequest.objects.get(kind="message_draft")
    approval_approve(
        request, user=boss.user, edited_payload={**request.payload, "body": "A technician will quote on site."}
    )
    draft.refresh_from_db()
    assert (draft.status, draft.body) == ("pending_approval", "It's $199.")  # the edit is mia's proposal now
    approval_approve(request, user=member_create(lead.business, Role.OWNER, username="olga").user)
    draft.refresh_from_db()
    assert (draft.status, draft.body) == ("dry_run", "A technician will quote on site.")


def test_an_edited_draft_is_re_read_by_the_claims_guard_for_the_next_person(lead, boss):
    message_send(
        lead=lead,
        channel="sms",
        body="Call us back?",
        actor="agent:sms_assistant",
        idempotency_key="d5",
        automated=False,
        needs_approval=True,
    )
    request = ApprovalRequest.objects.get(kind="message_draft")

    approval_edit(request, user=boss.user, payload={"body": "It's $199 and guaranteed for life."})

    request.refresh_from_db()
    assert request.summary.startswith("Edited by mia; claims: price “$199”, warranty “guaranteed")
    edit = Receipt.objects.get(subject=request.public_id, action="approval.edited")
    assert edit.after["findings"] == [request.summary.split("; ", 1)[1].split(" — ")[0]]


def test_a_draft_that_left_the_queue_cannot_be_edited_or_approved_but_may_be_rejected(lead, boss, business):
    draft = message_send(
        lead=lead,
        channel="sms",
        body="It's $199.",
        actor="agent:sms_assistant",
        idempotency_key="d6",
        automated=False,
        needs_approval=True,
    )
    first = ApprovalRequest.objects.get(kind="message_draft")
    second = approval_request_open(
        business=business,
        lead=lead,
        kind="message_draft",
        summary="Again",
        proposed_by="agent:sms_assistant",
        payload={"message": draft.public_id, "body": draft.body},
    )
    approval_approve(first, user=boss.user)

    with pytest.raises(ApprovalConflict, match="dry_run, no longer waiting"):
        approval_edit(second, user=boss.user, payload={"body": "It's $1,990."})
    with pytest.raises(ApprovalConflict):
        approval_approve(second, user=boss.user)
    approval_reject(second, user=boss.user, note="sent already")

    draft.refresh_from_db()
    assert (draft.status, draft.body, draft.block_reason) == ("dry_run", "It's $199.", "")
    assert ApprovalRequest.objects.get(pk=second.pk).status == "rejected"


def test_a_rejected_draft_is_blocked_as_rejected(lead, boss):
    draft = message_send(
        lead=lead,
        channel="sms",
        body="Guaranteed by 5pm!",
        actor="sam",
        idempotency_key="d2",
        automated=False,
        needs_approval=True,
    )
    approval_reject(ApprovalRequest.objects.get(kind="message_draft"), user=boss.user, note="no promises")
    draft.refresh_from_db()
    assert (draft.status, draft.block_reason) == ("blocked", "rejected")


def model_read_stop(lead: Lead, body: str) -> Message:
    """A text only a language model read as a stop: the question it opens
    (the consent check records the stops it reads itself, and asks nobody)."""
    text = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        contact_point=lead.contact.points.get(),
        channel="sms",
        status="received",
        body=body,
    )
    revocation_ask(text, lead, actor="agent:ai_assistant", why="The model reads this as a revocation. ")
    return text


def test_a_plain_word_stop_is_recorded_and_confirmed_without_a_question(lead, boss):
    inbound(lead, "please stop texting me")
    assert Contact.objects.get().automation_paused
    state = ConsentState.objects.get(contact_point__contact=lead.contact, channel="sms")
    assert (state.status, state.last_event.basis) == ("revoked", "plain_words")
    assert not ApprovalRequest.objects.filter(kind="opt_out_question").exists()


def test_a_confirmed_opt_out_question_revokes_consent(lead, boss):
    model_read_stop(lead, "we are moving out of state soon")
    assert Contact.objects.get().automation_paused
    approval_approve(ApprovalRequest.objects.get(kind="opt_out_question"), user=boss.user)
    state = ConsentState.objects.get(contact_point__contact=lead.contact, channel="sms")
    assert (state.status, state.last_event.basis) == ("revoked", "free_text_confirmed")


def test_a_denied_opt_out_question_resumes_automation(lead, boss):
    model_read_stop(lead, "take it easy for today, call tomorrow")
    approval_reject(
        ApprovalRequest.objects.get(kind="opt_out_question"), user=boss.user, note="they asked for tomorrow"
    )
    assert not Contact.objects.get().automation_paused
    assert ConsentState.objects.get(contact_point__contact=lead.contact, channel="sms").status == "granted"


def test_a_dismissed_complaint_releases_the_hold(lead, boss):
    inbound(lead, "this is harassment")
    assert Lead.objects.get().hold
    approval_reject(ApprovalRequest.objects.get(kind="complaint"), user=boss.user, note="a joke between friends")
    lead.refresh_from_db()
    assert not lead.hold and not lead.contact.automation_paused


def test_a_setter_cannot_approve_their_own_draft_even_by_database(lead, boss, business):
    from django.db import IntegrityError, transaction

    sam = member_create(business, Role.MANAGER, username="sam-manager")
    message_send(
        lead=lead,
        channel="sms",
        body="It's $199.",
        actor="sam-manager",
        idempotency_key="d3",
        automated=False,
        needs_approval=True,
        requested_by=sam.user,
    )
    request = ApprovalRequest.objects.get(kind="message_draft")
    assert request.proposed_by_user == sam.user
    from django.utils import timezone

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_not_self_approved"), transaction.atomic():
        ApprovalRequest.objects.filter(pk=request.pk).update(
            status="approved", decided_by=sam.user, decided_at=timezone.now()
        )
