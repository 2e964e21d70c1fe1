"""Needs-reply is exactly "someone wrote and no answer reached them", over
random interleavings of what happens in a conversation.

Each example plays a list of steps on a fresh lead through the services a
person and the roles use (a message in, a setter's reply that goes out or is
held for a price, a manager approving or rejecting the oldest held reply, a
reply blocked by a hold, one that fails at the provider, an automated
nudge, a person marking the conversation done) and after every step
compares the conversation row with a model of the conversation kept here
from what each step means, not from message statuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from itertools import count

import pytest
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agents.followup.replies import reply_record
from agents.outbound.dispatch import message_give_up
from agents.outbound.gate import message_send
from agents.playbook.copilot import reply_send
from approvals.models import ApprovalRequest
from approvals.services import approval_approve, approval_reject
from crm.models import Business, Conversation, Lead, Message, TeamMember
from crm.services import lead_sync
from crm.services.conversations import conversation_settle
from tests.factories import lead_create
from tests.helpers.followup import consent_all

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def open_all_day(business: Business) -> None:
    """Quiet hours open around the clock: these tests send at the wall
    clock's time, and a reply judged at 9 pm in New York would be deferred
    instead of sent or held."""
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time.max
    business.save(update_fields=["quiet_hours_start", "quiet_hours_end"])


STEPS = ("in", "reply", "held", "approve", "reject", "blocked", "failed", "auto", "done")
PHONES = count(1000)
CASES = count(1)


@dataclass
class Model:
    """The conversation as the steps say it is."""

    inbound: list[datetime] = field(default_factory=list)
    answered: datetime | None = None  # the newest answer that reached the person, or a settle
    held: list[tuple[Message, datetime]] = field(default_factory=list)  # waiting for a manager

    def waiting_since(self) -> datetime | None:
        return min((t for t in self.inbound if self.answered is None or t > self.answered), default=None)

    def reached(self, at: datetime) -> None:
        self.answered = at if self.answered is None else max(self.answered, at)

    def held_since(self) -> datetime | None:
        if self.waiting_since() is None:
            return None
        return min((t for _m, t in self.held if self.answered is None or t > self.answered), default=None)


def _play(business: Business, setter: TeamMember, manager: TeamMember, steps: list[str]) -> None:
    lead: Lead = lead_create(business, phone=f"+1212555{next(PHONES):04d}")
    lead_sync.lead_assign(lead, setter, actor="test", reason="owner")
    consent_all(lead)
    model, clock = Model(), timezone.now()
    case = next(CASES)
    for i, step in enumerate(steps):
        clock += timedelta(seconds=30)
        key = f"p{case}:{i}"
        if step == "in":
            message = reply_record(lead, channel="sms", body="Are you there? I need help.", actor="test", now=clock)
            model.inbound.append(message.created_at)
        elif step == "reply":
            sent = reply_send(lead, user=setter.user, body="Yes, we can help.", form_key=key, now=clock)
            assert sent.status in (Message.Status.DRY_RUN, Message.Status.DEFERRED)
            model.reached(clock)
        elif step == "held":
            held = reply_send(lead, user=setter.user, body="It's $89 to come out.", form_key=key, now=clock)
            assert held.status == Message.Status.PENDING_APPROVAL
            model.held.append((held, clock))
        elif step in ("approve", "reject") and model.held:
            message, at = model.held.pop(0)
            request = ApprovalRequest.objects.get(payload__message=message.public_id)
            if step == "approve":
                approval_approve(request, user=manager.user)
                model.reached(at)  # the approved answer counts from when it was written
            else:
                approval_reject(request, user=manager.user, note="no prices by text")
        elif step == "blocked":
            lead_sync.lead_set_hold(lead, True, actor="test", reason="hold")
            blocked = reply_send(lead, user=setter.user, body="Hello again.", form_key=key, now=clock)
            lead_sync.lead_set_hold(lead, False, actor="test", reason="release")
            assert blocked.status == Message.Status.BLOCKED
        elif step == "failed":
            with override_settings(SEND_MODE="live"):
                sent = reply_send(lead, user=setter.user, body="On our way soon.", form_key=key, now=clock)
            assert message_give_up(sent, from_status=sent.status, reason="the carrier refused it")
        elif step == "auto":
            message_send(
                lead=lead,
                channel="sms",
                body="Just checking in!",
                actor="agent:no_reply_follow_up",
                idempotency_key=key,
                automated=True,
                now=clock,
            )
        elif step == "done":
            conversation_settle(lead, actor="sam", reason="nothing to answer", at=clock)
            model.reached(clock)
        convo = Conversation.objects.get(lead=lead)
        context = f"after {steps[: i + 1]}"
        assert convo.awaiting_since == model.waiting_since(), context
        assert convo.held_since == model.held_since(), context
        if convo.awaiting_since is None:
            assert convo.missed_answer_id is None and convo.urgent_since is None, context


@hypothesis_settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=9))
def test_needs_reply_is_exactly_someone_wrote_and_no_answer_reached_them(business, setter, manager, steps):
    _play(business, setter, manager, steps)
