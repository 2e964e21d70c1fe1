"""A decision addressed to someone in a lead's conversation (a held reply of
theirs rejected, approved with edits, expired) counts as unread for them
alone, beside the messages in, until they read the conversation."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from crm.inbox import InboxQuery, inbox_page, unread_conversations
from crm.models import Business, Lead, Note, Receipt, TeamMember
from crm.services import lead_sync
from crm.services.conversations import conversation_read, decision_note_add, note_add
from tests.factories import lead_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def lead(business: Business, setter: TeamMember) -> Lead:
    lead = lead_create(business, first_name="Rosa", phone="+12125550147")
    return lead_sync.lead_assign(lead, setter, actor="test", reason="test owner")


def row_unread(member: TeamMember, lead: Lead, who: str) -> int:
    page = inbox_page(member.user, InboxQuery(who=who), now=timezone.now())
    return next(row.unread for row in page.rows if row.pk == lead.pk)


def test_a_decision_is_unread_for_its_addressee_alone_until_they_read_the_conversation(lead, setter, manager):
    note_add(lead, author="mia", body="A note for the team counts for nobody.")
    assert (unread_conversations(setter.user), unread_conversations(manager.user)) == (0, 0)

    decision = decision_note_add(lead, author="mia", body="sam's reply was rejected by mia.", addressee=setter.user)

    assert (decision.kind, decision.addressee) == (Note.Kind.DECISION, setter.user)
    receipt = Receipt.objects.get(subject=decision.public_id)
    assert (receipt.action, receipt.actor, receipt.after["to"]) == ("note.added", "mia", setter.user.username)
    assert (unread_conversations(setter.user), row_unread(setter, lead, "mine")) == (1, 1)
    assert (unread_conversations(manager.user), row_unread(manager, lead, "team")) == (0, 0)

    conversation_read(setter.user, lead)
    assert (unread_conversations(setter.user), row_unread(setter, lead, "mine")) == (0, 0)


def test_a_decision_on_a_lead_no_longer_theirs_is_not_counted(business, lead, setter, manager):
    decision_note_add(lead, author="mia", body="sam's reply was rejected by mia.", addressee=setter.user)
    lead_sync.lead_assign(lead, manager, actor="test", reason="taken over")

    assert unread_conversations(setter.user) == 0, "a setter no longer sees the conversation"


def test_only_a_decision_is_addressed_to_someone(business, lead, setter):
    with pytest.raises(IntegrityError, match="crm_note_addressee_only_on_decision"), transaction.atomic():
        Note.objects.create(business=business, lead=lead, author="sam", body="for mia", addressee=setter.user)
    with pytest.raises(IntegrityError, match="crm_note_kind_valid"), transaction.atomic():
        Note.objects.create(business=business, lead=lead, author="sam", body="?", kind="memo")
