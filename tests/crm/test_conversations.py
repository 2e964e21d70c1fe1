"""A lead's conversation at a glance (crm.models.Conversation), kept by the
database from the messages, and the inbox read over it (crm.inbox)."""

from __future__ import annotations

from datetime import time, timedelta
from functools import partial
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from agents.followup.replies import reply_record
from agents.outbound.dispatch import message_give_up
from agents.outbound.gate import message_send
from agents.outbound.keyword_replies import inbound_text_apply
from agents.playbook.copilot import reply_send
from approvals.models import ApprovalRequest
from approvals.services import approval_approve, approval_reject
from crm import inbox
from crm.inbox import PAGE_SIZE, InboxQuery, inbox_page, unread_conversations
from crm.models import Business, Conversation, Lead, Message, Note, Role, Stage, TeamMember
from crm.services import lead_sync
from crm.services.conversations import conversation_read, conversation_settle, note_add
from tests.factories import lead_create, member_create
from tests.helpers.followup import consent_all
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def open_all_day(business: Business) -> None:
    """Quiet hours open around the clock: these tests send at the wall
    clock's time, and a reply judged at 9 pm in New York would be deferred
    instead of sent or held."""
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time.max
    business.save(update_fields=["quiet_hours_start", "quiet_hours_end"])


def _lead(business: Business, owner: TeamMember | None = None, phone: str = "+12125550147", **kw: object) -> Lead:
    lead = lead_create(business, phone=phone, **kw)  # type: ignore[arg-type]
    if owner is not None:
        lead_sync.lead_assign(lead, owner, actor="test", reason="test owner")
    consent_all(lead)
    return lead


def _in(lead: Lead, body: str = "Can you come Tuesday?", at: object = None) -> Message:
    return reply_record(lead, channel="sms", body=body, actor="test", now=at)  # type: ignore[arg-type]


def _reply(lead: Lead, actor: str, body: str = "Yes, Tuesday at 9 works.", automated: bool = False) -> Message:
    return message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=actor,
        idempotency_key=f"t:{lead.pk}:{actor}:{body}:{timezone.now().timestamp()}",
        automated=automated,
    )


def _held(lead: Lead, setter: TeamMember, body: str = "It's $89 to come out, we can do Tuesday.") -> Message:
    """A setter's reply that the claims guard holds for a manager (a price)."""
    return reply_send(lead, user=setter.user, body=body, form_key=f"f{timezone.now().timestamp()}")


def _request(message: Message) -> ApprovalRequest:
    return ApprovalRequest.objects.get(payload__message=message.public_id)


def test_a_reply_held_for_approval_keeps_the_person_waiting_and_says_since_when(business, setter):
    lead = _lead(business, setter)
    first = _in(lead, "How much to fix my furnace?")
    held = _held(lead, setter)
    assert held.status == Message.Status.PENDING_APPROVAL
    convo = Conversation.objects.get(lead=lead)
    assert convo.awaiting_since == first.created_at, "a held answer has not reached the person"
    assert convo.held_since == held.created_at and convo.missed_answer_id is None


def test_a_rejected_reply_leaves_the_person_waiting_with_the_rejection_named(business, setter, manager):
    lead = _lead(business, setter)
    first = _in(lead, "How much to fix my furnace?")
    held = _held(lead, setter)
    approval_reject(_request(held), user=manager.user, note="No prices by text, call them")
    convo = Conversation.objects.get(lead=lead)
    assert convo.awaiting_since == first.created_at and convo.held_since is None
    assert convo.missed_answer_id == held.pk
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(needs_reply=True), now=timezone.now()).rows] == [lead.pk]


def test_an_approved_held_reply_answers_the_person(business, setter, manager):
    lead = _lead(business, setter)
    _in(lead, "How much to fix my furnace?")
    held = _held(lead, setter)
    approval_approve(_request(held), user=manager.user)
    held.refresh_from_db()
    assert held.status in (Message.Status.DRY_RUN, Message.Status.DEFERRED)
    convo = Conversation.objects.get(lead=lead)
    assert convo.awaiting_since is None and convo.held_since is None and convo.missed_answer_id is None


def test_an_answer_that_fails_puts_the_person_back_to_waiting(business, setter, settings):
    settings.SEND_MODE = "live"
    lead = _lead(business, setter)
    first = _in(lead)
    answer = _reply(lead, setter.user.username)
    assert answer.status in (Message.Status.QUEUED, Message.Status.DEFERRED)
    assert Conversation.objects.get(lead=lead).awaiting_since is None
    assert message_give_up(answer, from_status=answer.status, reason="the provider refused the number")
    convo = Conversation.objects.get(lead=lead)
    assert convo.awaiting_since == first.created_at and convo.missed_answer_id == answer.pk


def test_a_closing_word_on_a_lost_lead_waits_on_no_one_but_a_question_does(business, setter):
    lead = _lead(business, setter)
    lead_sync.lead_close(lead, Stage.LOST, actor="test", reason="closed", lost_reason="went with another company")
    _in(lead, "thanks, we went with them")
    assert Conversation.objects.get(lead=lead).awaiting_since is None
    question = _in(lead, "Actually can you still come Tuesday?")
    assert Conversation.objects.get(lead=lead).awaiting_since == question.created_at


def test_an_urgent_message_heads_the_inbox_above_longer_waits(business, setter):
    now = timezone.now()
    sunday = _lead(business, setter, phone="+12125550170", first_name="Sunday")
    _in(sunday, "are you open on sundays?", at=now - timedelta(days=2))
    flood = _lead(business, setter, phone="+12125550171", first_name="Flood")
    message = _in(flood, "there's water pouring into the basement right now", at=now - timedelta(minutes=2))
    assert message.urgent
    page = inbox_page(setter.user, InboxQuery(), now=now)
    assert [row.contact.first_name for row in page.rows][:2] == ["Flood", "Sunday"]
    assert page.rows[0].bucket == inbox.URGENT and page.rows[1].bucket == inbox.WAITING
    assert Conversation.objects.get(lead=flood).urgent_since == message.created_at


def test_a_held_and_waiting_conversation_comes_before_plain_waiting(business, setter):
    now = timezone.now()
    plain = _lead(business, setter, phone="+12125550172", first_name="Plain")
    _in(plain, "hello?", at=now - timedelta(hours=5))
    held = _lead(business, setter, phone="+12125550173", first_name="Held")
    _in(held, "How much for a tune-up?", at=now - timedelta(minutes=10))
    _held(held, setter)
    page = inbox_page(setter.user, InboxQuery(), now=now)
    assert [row.contact.first_name for row in page.rows][:2] == ["Held", "Plain"]
    assert page.rows[0].bucket == inbox.HELD


def test_a_message_in_waits_for_a_person_until_a_person_answers(business, setter):
    lead = _lead(business, setter)
    first = _in(lead, "Hi, is anyone there?")
    _in(lead, "Hello?")
    convo = Conversation.objects.get(lead=lead)
    assert convo.awaiting_since == first.created_at
    assert convo.last_inbound_at is not None and convo.last_inbound_at > first.created_at

    answer = _reply(lead, setter.user.username)
    assert answer.status in (Message.Status.DRY_RUN, Message.Status.DEFERRED)
    convo.refresh_from_db()
    assert convo.awaiting_since is None
    assert convo.last_message_id == answer.pk and convo.last_channel == "sms"


def test_an_automated_send_or_a_roles_send_answers_nothing(business, setter):
    lead = _lead(business, setter)
    _in(lead)
    _reply(lead, "agent:no_reply_follow_up", "Just checking in!", automated=True)
    _reply(lead, "agent:consent_check", "Reply STOP to opt out.")
    assert Conversation.objects.get(lead=lead).awaiting_since is not None


def test_a_blocked_reply_does_not_answer_but_the_same_reply_going_out_later_does(business, setter):
    lead = _lead(business, setter)
    _in(lead)
    lead_sync.lead_set_hold(lead, True, actor="test", reason="checking")
    blocked = _reply(lead, setter.user.username)
    assert blocked.status == Message.Status.BLOCKED
    assert Conversation.objects.get(lead=lead).awaiting_since is not None


def test_a_stop_keyword_settles_the_conversation_and_a_later_question_waits_again(business, setter):
    lead = _lead(business, setter)
    stop = _in(lead, "STOP")
    inbound_text_apply(message=stop, lead=lead)
    convo = Conversation.objects.get(lead=lead)
    assert convo.awaiting_since is None and convo.settled_at == stop.created_at

    later = _in(lead, "Sorry, wrong button. When can you come?", at=stop.created_at + timedelta(minutes=5))
    assert Conversation.objects.get(lead=lead).awaiting_since == later.created_at


def test_a_person_marks_a_conversation_done_with_a_receipt(business, setter):
    lead = _lead(business, setter)
    _in(lead, "Thanks, see you Tuesday!")
    assert conversation_settle(lead, actor=setter.user.username, reason="nothing to answer")
    assert Conversation.objects.get(lead=lead).awaiting_since is None
    assert lead.receipts.filter(action="conversation.settled", actor=setter.user.username).count() == 1
    assert not conversation_settle(lead, actor=setter.user.username, reason="again")  # nothing left: no receipt
    assert lead.receipts.filter(action="conversation.settled").count() == 1


def test_a_message_moved_to_another_lead_rebuilds_both_conversations(business, setter):
    one = _lead(business, setter)
    other = _lead(business, setter, phone="+12125550148", first_name="Rosa")
    moved = _in(one, "first lead's question")
    Message.objects.filter(pk=moved.pk).update(lead=other)
    emptied = Conversation.objects.get(lead=one)
    assert emptied.last_message_id is None and emptied.awaiting_since is None
    assert emptied.last_activity_at == one.created_at
    convo = Conversation.objects.get(lead=other)
    assert convo.last_message_id == moved.pk and convo.awaiting_since == moved.created_at


@pytest.mark.django_db(transaction=True)
def test_concurrent_messages_of_one_lead_meet_in_one_conversation_row(business):
    owner = member_create(business, Role.SETTER, username="sam")
    lead = _lead(business, owner)
    base = timezone.now()
    run_together([partial(_in, lead, f"message {i}", at=base + timedelta(seconds=i)) for i in range(6)], timeout=30)
    convo = Conversation.objects.get(lead=lead)
    newest = Message.objects.filter(lead=lead).latest("created_at")
    assert convo.last_message_id == newest.pk
    assert convo.awaiting_since == base and convo.last_inbound_at == base + timedelta(seconds=5)


def test_read_marks_only_move_forward(business, setter):
    lead = _lead(business, setter)
    now = timezone.now()
    conversation_read(setter.user, lead, at=now)
    conversation_read(setter.user, lead, at=now - timedelta(hours=1))
    with connection.cursor() as cursor:
        cursor.execute("SELECT read_at FROM crm_conversationread WHERE lead_id = %s", [lead.pk])
        assert cursor.fetchone()[0] == now


def test_a_note_is_kept_with_its_receipt_and_an_empty_one_is_refused(business, setter):
    lead = _lead(business, setter)
    note = note_add(lead, author="sam", body="  Prefers mornings. ")
    assert Note.objects.get(pk=note.pk).body == "Prefers mornings."
    assert lead.receipts.filter(action="note.added", subject=note.public_id).exists()
    with pytest.raises(ValueError):
        note_add(lead, author="sam", body="   ")


# --- the inbox -----------------------------------------------------------------


def test_the_inbox_puts_who_waits_first_then_the_sla_then_overdue_next_actions(business, setter):
    now = timezone.now()
    quiet = _lead(business, setter, phone="+12125550150", first_name="Quiet")
    overdue = _lead(business, setter, phone="+12125550151", first_name="Overdue")
    lead_sync.lead_set_next_action(overdue, "Call back", now - timedelta(hours=2), actor="test", reason="t")
    sla = _lead(business, setter, phone="+12125550152", first_name="Sla")
    lead_sync.lead_set_sla(sla, now + timedelta(minutes=5), actor="test", reason="t")
    waiting_long = _lead(business, setter, phone="+12125550153", first_name="Long")
    _in(waiting_long, "hello?", at=now - timedelta(hours=3))
    waiting_short = _lead(business, setter, phone="+12125550154", first_name="Short")
    _in(waiting_short, "hi", at=now - timedelta(minutes=3))

    page = inbox_page(setter.user, InboxQuery(), now=now)
    order = [row.contact.first_name for row in page.rows]
    assert order[:4] == ["Long", "Short", "Sla", "Overdue"]
    assert order[4:] == [quiet.contact.first_name] and page.waiting == 2 and not page.has_next
    by_name: dict[str, Any] = {row.contact.first_name: row for row in page.rows}
    assert by_name["Long"].unread == 1 and by_name["Long"].bucket == inbox.WAITING
    assert by_name["Quiet"].first_channel == "form"


def test_a_setter_sees_only_their_leads_and_reading_clears_their_unread_not_a_managers(business, setter):
    manager = member_create(business, Role.MANAGER, username="mia")
    other = member_create(business, Role.SETTER, username="otto")
    mine = _lead(business, setter, phone="+12125550160", first_name="Mine")
    theirs = _lead(business, other, phone="+12125550161", first_name="Theirs")
    _in(mine)
    _in(theirs)
    now = timezone.now()

    assert [r.pk for r in inbox_page(setter.user, InboxQuery(), now=now).rows] == [mine.pk]
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(who="team"), now=now).rows] == [mine.pk]
    assert {r.pk for r in inbox_page(manager.user, InboxQuery(), now=now).rows} == {mine.pk, theirs.pk}
    assert unread_conversations(setter.user) == 1

    conversation_read(setter.user, mine)
    assert unread_conversations(setter.user) == 0
    rows: dict[int, Any] = {r.pk: r for r in inbox_page(manager.user, InboxQuery(), now=now).rows}
    assert rows[mine.pk].unread == 1  # the manager has not read it


def test_the_inbox_filters_and_searches(business, setter):
    now = timezone.now()
    rosa = _lead(business, setter, phone="+13125550170", first_name="Rosa", last_name="Diaz")
    _in(rosa)
    ben = _lead(business, setter, phone="+13125550171", first_name="Ben")
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(needs_reply=True), now=now).rows] == [rosa.pk]
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(q="(312) 555-0171"), now=now).rows] == [ben.pk]
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(q=rosa.public_id), now=now).rows] == [rosa.pk]
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(channel="sms"), now=now).rows] == [rosa.pk]
    lead_sync.lead_transition(ben, "lost", actor="test", reason="t")
    assert [r.pk for r in inbox_page(setter.user, InboxQuery(), now=now).rows] == [rosa.pk]
    assert {r.pk for r in inbox_page(setter.user, InboxQuery(stage="all"), now=now).rows} == {rosa.pk, ben.pk}


def test_an_inbox_page_reads_only_the_parts_of_the_order_it_reaches(business, setter, django_assert_num_queries):
    """Memberships, the ids part by part (a part is read only while the page
    is not full), the page's rows with what they show, the waiting count."""
    for i in range(12):
        lead = _lead(business, setter, phone=f"+1312555{i:04d}", first_name=f"P{i}")
        _in(lead, f"question {i}")
    user = type(setter.user).objects.get(pk=setter.user.pk)  # memberships not read yet
    with django_assert_num_queries(1 + 6 + 2):  # twelve waiting leave the page open: every part is read
        page = inbox_page(user, InboxQuery(), now=timezone.now())
        assert len(page.rows) == 12 and page.waiting == 12 and not page.has_next
        assert all(row.conversation.last_message.body for row in page.rows)
    for i in range(12, 12 + PAGE_SIZE):
        _in(_lead(business, setter, phone=f"+1312555{i:04d}", first_name=f"P{i}"), "hello?")
    user = type(setter.user).objects.get(pk=setter.user.pk)
    # The waiting fill the page: the urgent and held parts (empty), then the waiting part.
    with django_assert_num_queries(1 + 3 + 2):
        page = inbox_page(user, InboxQuery(), now=timezone.now())
        assert len(page.rows) == PAGE_SIZE and page.has_next


def test_the_conversation_keeps_the_intent_of_the_persons_last_message(business, setter):
    lead = _lead(business, setter)
    first = _in(lead, "How much is a tune-up?")
    last = _in(lead, "Actually, can you come Tuesday?")
    # A later reading (a model's) of each message: only the last one's counts.
    Message.objects.filter(pk=last.pk).update(intent="booking_request")
    Message.objects.filter(pk=first.pk).update(intent="price_question")
    assert Conversation.objects.get(lead=lead).last_intent == "booking_request"
    rows = inbox_page(setter.user, InboxQuery(intent="booking_request"), now=timezone.now()).rows
    assert [r.pk for r in rows] == [lead.pk] and rows[0].last_intent == "booking_request"
    assert not inbox_page(setter.user, InboxQuery(intent="price_question"), now=timezone.now()).rows


def test_a_closing_word_that_came_before_the_close_stops_waiting_when_the_lead_is_lost(business, setter):
    lead = _lead(business, setter)
    _in(lead, "Thanks, but we decided to go with them. Appreciate it.")
    assert Conversation.objects.get(lead=lead).awaiting_since is not None
    lead_sync.lead_close(lead, Stage.LOST, actor="sam", reason="closed", lost_reason="went with another company")
    assert Conversation.objects.get(lead=lead).awaiting_since is None
