"""The Human Setter Copilot: what it offers a setter, and sending what they
chose through the gate."""

from __future__ import annotations

from datetime import time

import pytest

from agents.playbook.copilot import reply_offer, reply_send
from approvals.models import ApprovalRequest
from crm.models import Business, Lead, Message, MessageTemplate, TeamMember
from crm.services import lead_sync
from tests.factories import lead_create
from tests.helpers.followup import consent_all

pytestmark = pytest.mark.django_db

SCHEDULE = "Hi {first_name}, thanks for writing. What day and time work best for a visit?"


@pytest.fixture
def lead(business: Business, setter: TeamMember) -> Lead:
    Business.objects.filter(pk=business.pk).update(quiet_hours_start=time(0, 0), quiet_hours_end=time(23, 59, 59))
    MessageTemplate.objects.create(business=business, key="scheduling_sms", channel="sms", approved=True, body=SCHEDULE)
    MessageTemplate.objects.create(business=business, key="draft_sms", channel="sms", approved=False, body="Hi")
    lead = lead_sync.lead_assign(lead_create(business, first_name="Rosa"), setter, actor="t", reason="t")
    consent_all(lead)
    return lead


def test_the_offer_is_the_suggestion_the_approved_templates_and_the_reachable_channels(lead: Lead) -> None:
    offer = reply_offer(lead, "When can you come?")
    assert offer.suggested.body == "Hi Rosa, thanks for writing. What day and time work best for a visit?"
    assert [d.template_key for d in offer.templates] == ["scheduling_sms"], "approved ones only"
    assert offer.channels == ["sms"], "no email on record"


def test_an_offered_template_sent_unmodified_goes_as_approved_text(lead: Lead, setter: TeamMember) -> None:
    body = "Hi Rosa, thanks for writing. What day and time work best for a visit?"
    sent = reply_send(lead, user=setter.user, body=body, form_key="f1", template_key="scheduling_sms")
    assert (sent.status, sent.template_key, sent.actor, sent.automated) == ("dry_run", "scheduling_sms", "sam", False)


def test_an_edit_with_claims_waits_for_a_manager_and_one_without_goes(lead: Lead, setter: TeamMember) -> None:
    risky = reply_send(lead, user=setter.user, body="Only $99 today, guaranteed!", form_key="f2")
    assert risky.status == "pending_approval"
    assert ApprovalRequest.objects.get(kind="message_draft").proposed_by_user_id == setter.user_id
    plain = reply_send(
        lead, user=setter.user, body="Which address is it?", form_key="f3", template_key="scheduling_sms"
    )
    assert plain.status == "dry_run" and plain.template_key == "scheduling_sms"


def test_the_same_composer_form_sends_once(lead: Lead, setter: TeamMember) -> None:
    first = reply_send(lead, user=setter.user, body="Which address is it?", form_key="same")
    again = reply_send(lead, user=setter.user, body="Which address is it?", form_key="same")
    assert first.pk == again.pk and Message.objects.filter(direction="out").count() == 1


def test_a_channel_a_setter_cannot_answer_on_is_refused(lead: Lead, setter: TeamMember) -> None:
    with pytest.raises(ValueError, match="sms or instagram or email"):
        reply_send(lead, user=setter.user, body="Hi", form_key="f4", channel="voice")
    assert not Message.objects.filter(direction="out").exists()
