"""The setters' workspace (`/app/`): the inbox, the thread, their actions
as plain form posts (no JavaScript), the live fragments' conditional
answers, permissions per role, and a constant number of queries per page."""

from __future__ import annotations

import html
import json
import re
from datetime import time, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.processing import event_process
from agents.followup.replies import reply_record
from agents.followup.sequences.engine import enrollment_start
from approvals.models import ApprovalRequest
from crm.localtime import moment_words
from crm.models import (
    Business,
    Call,
    Conversation,
    InboundEvent,
    Lead,
    Message,
    MessageTemplate,
    Note,
    Receipt,
    Role,
    Sequence,
    Source,
    Stage,
    Task,
    TeamMember,
    Timer,
)
from crm.services import lead_sync
from crm.services.conversations import decision_note_add, note_add
from crm.services.records import call_record, contact_create, lead_open
from crm.services.timers import timers_run_due
from tests.factories import BusinessFactory, lead_create, member_create
from tests.helpers.followup import NO_REPLY_STEPS, consent_all

pytestmark = pytest.mark.django_db

ACK = "Hi {first_name}, this is {business}. We got your request. Reply STOP to opt out."
SCHEDULE = "Hi {first_name}, thanks for writing. What day and time work best for a visit?"


@pytest.fixture
def business(db: None) -> Business:
    # Quiet hours wide open: what the gate says must not depend on the hour the tests run at.
    business = BusinessFactory.create(
        slug="acme",
        name="Acme Heating & Air",
        timezone="America/Chicago",
        quiet_hours_start=time(0, 0),
        quiet_hours_end=time(23, 59, 59),
    )
    MessageTemplate.objects.create(business=business, key="ack_sms", channel="sms", approved=True, body=ACK)
    MessageTemplate.objects.create(business=business, key="scheduling_sms", channel="sms", approved=True, body=SCHEDULE)
    return business


@pytest.fixture
def setter(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam")


@pytest.fixture
def manager(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="mia")


def login(member: TeamMember) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def make_lead(business: Business, owner: TeamMember | None, n: int = 47, first_name: str = "Rosa") -> Lead:
    lead = lead_create(business, phone=f"+121255501{n:02d}", first_name=first_name, last_name="Diaz")
    if owner is not None:
        lead = lead_sync.lead_assign(lead, owner, actor="test", reason="test owner")
    consent_all(lead, at=timezone.now())
    return lead


def text_in(lead: Lead, body: str = "Can you come Tuesday morning?", at=None) -> Message:
    return reply_record(lead, channel="sms", body=body, actor="test", now=at)


def thread_url(lead: Lead, tail: str = "") -> str:
    return f"/app/leads/{lead.public_id}/{tail}"


def flashes(response) -> list[str]:
    """The flash messages waiting after `response`, newest last."""
    return [str(m) for m in response.wsgi_request._messages]


# ------------------------------------------------------------------ the doors


def test_the_app_opens_on_the_inbox_and_asks_a_stranger_to_log_in(setter):
    assert Client().get("/app/")["Location"] == "/app/inbox/"
    response = Client().get("/app/inbox/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next=/app/inbox/")
    assert login(setter).get("/app/inbox/").status_code == 200
    # A poll whose session ended sends the whole page to the login, not the login into the page.
    polled = Client().get("/app/inbox/live/?v=x", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="/app/inbox/?q=rosa")
    assert polled.status_code == 204 and polled["HX-Redirect"].startswith("/admin/login/?next=/app/inbox/%3Fq%3Drosa")


def test_a_technician_has_no_workspace(business, setter):
    tom = member_create(business, Role.TECHNICIAN, username="tom")
    lead = make_lead(business, setter)
    client = login(tom)
    assert client.get("/app/inbox/").status_code == 403
    assert client.get(thread_url(lead)).status_code == 403
    assert client.post(thread_url(lead, "send/"), {"body": "Hi", "form_key": "k1"}).status_code == 403
    assert not Message.objects.filter(direction="out").exists()


def test_another_setters_or_businesses_lead_is_a_404_on_every_page_and_action(business, setter):
    sara = member_create(business, Role.SETTER, username="sara")
    other = BusinessFactory.create(slug="other", name="Other Plumbing")
    otto = member_create(other, Role.MANAGER, username="otto")
    lead = make_lead(business, sara)
    for client in (login(setter), login(otto)):
        assert client.get(thread_url(lead)).status_code == 404
        assert client.get(thread_url(lead, "live/")).status_code == 404
        for action in ("send/", "done/", "next-action/", "reached/", "hold/", "calls/", "notes/", "reassign/"):
            assert client.post(thread_url(lead, action), {"body": "x", "form_key": "k"}).status_code == 404, action
    assert not Message.objects.filter(direction="out").exists() and not Note.objects.exists()


def test_the_copilots_old_address_lands_on_the_thread(business, setter):
    lead = make_lead(business, setter)
    response = login(setter).get(f"/admin/leads/{lead.public_id}/copilot/")
    assert response.status_code == 302 and response["Location"] == thread_url(lead)


# ------------------------------------------------------------------ the inbox


def test_the_inbox_shows_who_waits_first_and_says_why_each_row_is_there(business, setter):
    now = timezone.now()
    quiet = make_lead(business, setter, 50, "Quinn")
    overdue = make_lead(business, setter, 51, "Omar")
    lead_sync.lead_set_next_action(overdue, "Call back", now - timedelta(hours=2), actor="t", reason="t")
    due = make_lead(business, setter, 52, "Sasha")
    lead_sync.lead_set_sla(due, now + timedelta(minutes=4, seconds=30), actor="t", reason="t")
    waiting = make_lead(business, setter, 53, "Wendy")
    text_in(waiting, "Hello? Is anyone there?", at=now - timedelta(minutes=12, seconds=10))

    page = login(setter).get("/app/inbox/").content.decode()
    order = [page.index(name) for name in ("Wendy", "Sasha", "Omar", "Quinn")]
    assert order == sorted(order), "waiting, then SLA, then overdue, then the rest"
    assert "waiting 12 min" in page and "SLA due in 4 min" in page and "next action overdue 2 h" in page
    assert "Hello? Is anyone there?" in page and 'title="1 unread"' in page
    assert quiet.public_id in page and "LeadOps" in page


def test_the_inbox_filters_and_finds_a_phone_in_any_format(business, setter, manager):
    rosa = make_lead(business, setter, 47, "Rosa")
    text_in(rosa)
    make_lead(business, setter, 48, "Ahmed")
    unowned = make_lead(business, None, 49, "Nadia")
    client = login(setter)
    found = client.get("/app/inbox/", {"q": "(212) 555-0147"}).content.decode()
    assert "Rosa" in found and "Ahmed" not in found
    assert "Ahmed" not in client.get("/app/inbox/", {"needs_reply": "on"}).content.decode()
    assert "Rosa" in client.get("/app/inbox/", {"channel": "sms"}).content.decode()
    assert "Rosa" not in client.get("/app/inbox/", {"channel": "email"}).content.decode()
    # A setter has no team view: the filter falls back to their own.
    mine = client.get("/app/inbox/", {"who": "team"}).content.decode()
    assert "Nadia" not in mine and ">Team<" not in mine
    lead_view = login(manager).get("/app/inbox/", {"who": "unassigned"}).content.decode()
    assert unowned.public_id in lead_view and rosa.public_id not in lead_view
    assert ">Team<" in login(manager).get("/app/inbox/").content.decode()


def test_marking_done_from_the_inbox_settles_the_conversation_and_returns_to_it(business, setter):
    lead = make_lead(business, setter)
    text_in(lead, "Thanks, see you Tuesday!")
    back = "/app/inbox/?needs_reply=on"
    response = login(setter).post(thread_url(lead, "done/"), {"next": back})
    assert response.status_code == 302 and response["Location"] == back
    assert Conversation.objects.get(lead=lead).awaiting_since is None
    assert Receipt.objects.filter(lead=lead, action="conversation.settled", actor="sam").count() == 1
    # Somewhere else is not a place to return to.
    assert login(setter).post(thread_url(lead, "done/"), {"next": "https://evil.example/"})["Location"] == thread_url(
        lead
    )


def test_the_inbox_answers_204_until_a_new_message_or_a_reassignment_changes_it(
    business, setter, manager, django_capture_on_commit_callbacks
):
    lead = make_lead(business, setter)
    client = login(setter)
    page = client.get("/app/inbox/").content.decode()
    version = page.split('data-version="')[1].split('"')[0]
    live = f"/app/inbox/live/?v={version}"
    assert client.get(live).status_code == 204

    with django_capture_on_commit_callbacks(execute=True):  # the receipt is sealed after commit
        text_in(lead, "Are you still coming?")
    fresh = client.get(live)
    assert fresh.status_code == 200 and "Are you still coming?" in fresh.content.decode()
    version = fresh.content.decode().split('data-version="')[1].split('"')[0]
    assert client.get(f"/app/inbox/live/?v={version}").status_code == 204

    sara = member_create(business, Role.SETTER, username="sara")
    with django_capture_on_commit_callbacks(execute=True):
        login(manager).post(thread_url(lead, "reassign/"), {"owner": sara.pk})
    moved = client.get(f"/app/inbox/live/?v={version}")
    assert moved.status_code == 200 and lead.public_id not in moved.content.decode()


def test_the_unread_badge_answers_204_while_its_number_is_current(business, setter):
    lead = make_lead(business, setter)
    client = login(setter)
    assert client.get("/app/unread/", {"n": "0"}).status_code == 204
    text_in(lead)
    badge = client.get("/app/unread/", {"n": "0"})
    assert badge.status_code == 200 and ">1</span>" in badge.content.decode()
    assert client.get("/app/unread/", {"n": "1"}).status_code == 204


def badge_number(html_text: str) -> int:
    """The number the unread badge shows (0 when it is empty)."""
    badge = re.search(r'<span id="unread-badge"[^>]*>([^<]*)</span>', html_text)
    assert badge, "the page has the unread badge"
    return int(badge.group(1) or 0)


def test_one_unread_count_everywhere_a_person_looks(business, setter, manager):
    """The top bar of the workspace, of the admin (the same fragment, asked
    for on load), of the approvals list and of a thread, and the bold rows
    of the inbox count the same conversations; reading one lowers them all."""
    sara = member_create(business, Role.SETTER, username="sara")
    mine = [make_lead(business, setter, n=40 + i, first_name=name) for i, name in enumerate(["Ann", "Bo", "Cy"])]
    theirs = make_lead(business, sara, n=45, first_name="Dee")
    unassigned = make_lead(business, None, n=46, first_name="Eve")
    for lead in [mine[0], mine[1], theirs, unassigned]:
        text_in(lead, "Are you there?")
    text_in(mine[0], "Hello?")  # two messages, still one conversation
    decision_note_add(mine[2], author="mia", body="Rejected: no prices by text.", addressee=setter.user)

    def everywhere(member: TeamMember, lead: Lead) -> dict[str, int]:
        client = login(member)
        inbox = client.get("/app/inbox/").content.decode()
        rows = re.findall(r'<li class="row[^"]*is-unread[^"]*" data-lead="([^"]+)"', inbox)
        counts = {
            "inbox bar": badge_number(inbox),
            "admin bar": badge_number(client.get("/app/unread/", {"n": "x"}).content.decode()),
            "bold rows (theirs)": len(rows),
        }
        if member.role != Role.SETTER:
            counts["approvals bar"] = badge_number(client.get("/app/approvals/").content.decode())
            mine_rows = client.get("/app/inbox/", {"who": "mine"}).content.decode()
            free_rows = client.get("/app/inbox/", {"who": "unassigned"}).content.decode()
            pattern = r'<li class="row[^"]*is-unread[^"]*" data-lead="([^"]+)"'
            counts["bold rows (theirs)"] = len(re.findall(pattern, mine_rows)) + len(re.findall(pattern, free_rows))
        thread = client.get(thread_url(lead)).content.decode()  # reading it: the bar already counts one fewer
        counts["thread bar"] = badge_number(thread) + 1
        return counts

    first = everywhere(setter, mine[0])
    assert set(first.values()) == {3}, first  # Ann, Bo and the decision on Cy; never Dee's or Eve's
    second = everywhere(setter, mine[2])
    assert set(second.values()) == {2}, second  # Ann's read: Bo and the decision
    leader = everywhere(manager, unassigned)
    assert set(leader.values()) == {1}, leader  # a leader's own (none) and the unassigned (Eve)


# ------------------------------------------------------------------ the thread


def test_opening_the_thread_marks_it_read_and_shows_the_whole_conversation(business, setter):
    lead = make_lead(business, setter)
    lead_sync.lead_set_hold(lead, True, actor="t", reason="checking a complaint")
    blocked = login(setter).post(
        thread_url(lead, "send/"), {"body": "Hi Rosa, checking in.", "form_key": "k-blocked", "channel": "sms"}
    )
    assert blocked.status_code == 302
    lead_sync.lead_set_hold(lead, False, actor="t", reason="fine")
    text_in(lead, "My furnace bangs when it starts.")
    Call.objects.create(
        business=business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        status="no-answer",
        started_at=timezone.now(),
    )
    call_record(
        lead=lead,
        actor="t",
        direction="in",
        status="no-answer",
        started_at=timezone.now(),
        recording_url="https://api.twilio.com/rec/RE1",
        transcript="Hi, it's Rosa, call me back please.",
    )
    note_add(lead, author="mia", body="Prefers mornings.")
    tomorrow = timezone.now() + timedelta(days=1)
    Lead.objects.filter(pk=lead.pk).update(next_action="Call back", next_action_due_at=tomorrow)
    client = login(setter)
    assert client.get("/app/unread/", {"n": "x"}).content.decode().count(">1<") == 1

    page = client.get(thread_url(lead)).content.decode()
    assert "My furnace bangs when it starts." in page
    assert "Blocked" in page and "the lead is on hold" in page
    assert "Missed call" in page and "Voicemail" in page and "call me back please" in page
    assert "Prefers mornings." in page and "Note</strong> by mia" in page
    assert "At a glance" in page and "May we contact" in page and "sms to +12125550147: yes" in page
    # The answers say their times as the rest of the page does, on the viewer's clock.
    glance = page.split('id="glance"')[1].split("</section>")[0]
    assert f"due {moment_words(tomorrow, ZoneInfo('America/Chicago'), relative=False)}" in glance, glance
    assert not re.search(r"\d{4}-\d{2}-\d{2}", glance), glance
    assert client.get("/app/unread/", {"n": "1"}).content.decode().count(">1<") == 0


def test_the_suggested_reply_goes_as_approved_text_and_its_verdict_shows_without_javascript(business, setter):
    lead = make_lead(business, setter)
    text_in(lead, "When can you come out?")
    client = login(setter)
    page = client.get(thread_url(lead)).content.decode()
    suggested = SCHEDULE.replace("{first_name}", "Rosa")
    assert suggested in page, "the person waits: the composer starts with the suggestion"

    form = {"body": suggested, "channel": "sms", "template_key": "scheduling_sms", "form_key": "form-1"}
    response = client.post(thread_url(lead, "send/"), form)
    sent = Message.objects.get(direction="out")
    assert response.status_code == 302 and response["Location"] == thread_url(lead) + f"?sent={sent.public_id}#composer"
    assert (sent.status, sent.actor, sent.automated, sent.template_key) == ("dry_run", "sam", False, "scheduling_sms")
    shown = client.get(response["Location"]).content.decode()
    assert 'id="send-verdict"' in shown and "Recorded, not sent (dry run)" in shown
    assert Conversation.objects.get(lead=lead).awaiting_since is None

    client.post(thread_url(lead, "send/"), form)  # the same form again: a double click
    assert Message.objects.filter(direction="out").count() == 1


def _composer_text(page: str) -> str:
    found = re.search(r'<textarea name="body" id="id_body"[^>]*>(.*?)</textarea>', page, re.DOTALL)
    assert found, "the composer is on the page"
    return html.unescape(found.group(1)).strip()


def test_the_composer_starts_empty_for_a_lead_who_never_wrote(business, setter):
    lead = make_lead(business, setter)
    page = login(setter).get(thread_url(lead)).content.decode()
    assert _composer_text(page) == "", "no first-contact acknowledgement typed in for the setter"
    assert 'id="suggestion-chip"' not in page


def test_the_suggestion_is_a_chip_saying_what_it_answers_and_who_drafted_it(business, setter):
    lead = make_lead(business, setter)
    text_in(lead, "When can you come out?")
    page = login(setter).get(thread_url(lead)).content.decode()
    assert _composer_text(page) == SCHEDULE.replace("{first_name}", "Rosa")
    chip = page[page.index('id="suggestion-chip"') :][:600]
    assert "answers their booking request" in chip and "from the playbook" in chip


def test_a_suggestion_that_already_went_out_is_never_typed_in_again(business, setter):
    lead = make_lead(business, setter)
    text_in(lead, "When can you come out?")
    client = login(setter)
    suggested = SCHEDULE.replace("{first_name}", "Rosa")
    form = {"body": suggested, "channel": "sms", "template_key": "scheduling_sms", "form_key": "form-1"}
    client.post(thread_url(lead, "send/"), form)
    text_in(lead, "And what time would that be?")
    assert _composer_text(client.get(thread_url(lead)).content.decode()) == ""


def test_a_risky_edit_waits_for_a_managers_approval(business, setter):
    lead = make_lead(business, setter)
    body = "We can do it for $199 tomorrow by 9am, guaranteed."
    login(setter).post(thread_url(lead, "send/"), {"body": body, "channel": "sms", "form_key": "risky"})
    risky = Message.objects.get(direction="out")
    assert risky.status == "pending_approval"
    request = ApprovalRequest.objects.get(kind="message_draft")
    assert request.payload["message"] == risky.public_id and request.proposed_by_user_id == setter.user_id


def test_sending_with_htmx_answers_the_composer_with_the_verdict_inline(business, setter):
    lead = make_lead(business, setter)
    response = login(setter).post(
        thread_url(lead, "send/"),
        {"body": "Thanks Rosa, noted. Which address is the furnace at?", "channel": "sms", "form_key": "hx-1"},
        HTTP_HX_REQUEST="true",
    )
    page = response.content.decode()
    assert response.status_code == 200 and page.lstrip().startswith('<div id="composer-wrap"')
    assert "Recorded, not sent (dry run)" in page and 'name="form_key"' in page and "hx-1" not in page
    assert json.loads(response["HX-Trigger"]) == {"workspace-changed": True}


def test_times_are_shown_in_the_viewers_zone_and_the_zone_is_named(business, setter):
    lead = make_lead(business, setter)
    due = timezone.now().replace(hour=20, minute=30, second=0, microsecond=0) + timedelta(days=3)
    lead_sync.lead_set_next_action(lead, "Call back", due, actor="t", reason="t")
    page = login(setter).get(thread_url(lead)).content.decode()
    local = timezone.localtime(due, timezone=ZoneInfo("America/Chicago"))
    assert f"{local:%-I}:30 {local:%p} {local.tzname()}" in page
    assert "America/Chicago" in page and " UTC" not in page

    TeamMember.objects.filter(pk=setter.pk).update(timezone="America/New_York")
    page = login(setter).get(thread_url(lead)).content.decode()
    assert "America/New_York" in page


# ------------------------------------------------------------------ actions, without JavaScript


def test_each_quick_action_writes_through_its_service_with_a_receipt(business, setter):
    lead = make_lead(business, setter)
    text_in(lead, "Call me please")
    client = login(setter)

    response = client.post(thread_url(lead, "next-action/"), {"title": "Call Rosa back", "due_at": "2031-03-04T15:30"})
    assert response.status_code == 302 and "Next action: Call Rosa back" in flashes(response)[0]
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    # The form speaks the viewer's zone (Chicago): 15:30 there is 21:30 UTC in March.
    assert (task.title, task.due_at.isoformat()) == ("Call Rosa back", "2031-03-04T21:30:00+00:00")

    assert client.post(thread_url(lead, "reached/")).status_code == 302
    lead.refresh_from_db()
    assert lead.first_response_at is not None and lead.stage == Stage.CONTACTED

    client.post(thread_url(lead, "calls/"), {"outcome": "connected", "direction": "out", "minutes": "4", "note": "ok"})
    call = Call.objects.get(lead=lead)
    assert (call.direction, call.status, call.outcome, call.duration_seconds) == ("out", "completed", "connected", 240)
    assert Receipt.objects.filter(subject=call.public_id, action="call.logged", actor="sam").exists()
    assert Conversation.objects.get(lead=lead).awaiting_since is None, "talking answers what they wrote"

    client.post(thread_url(lead, "notes/"), {"body": "Gate code 1234"})
    assert Note.objects.filter(lead=lead, author="sam", body="Gate code 1234").exists()

    client.post(thread_url(lead, "hold/"), {"hold": "1", "reason": "complaint"})
    lead.refresh_from_db()
    assert lead.hold and lead.hold_reason == "complaint"
    assert Timer.objects.filter(lead=lead, kind="orchestrate", payload__event="hold.set").count() == 1
    again = client.post(thread_url(lead, "hold/"), {"hold": "1"})
    assert "already on hold" in flashes(again)[-1]
    client.post(thread_url(lead, "hold/"), {"hold": "0"})
    lead.refresh_from_db()
    assert not lead.hold


def test_a_manager_reassigns_and_the_next_action_moves_with_the_lead_but_a_setter_may_not(business, setter, manager):
    sara = member_create(business, Role.SETTER, username="sara")
    lead = make_lead(business, setter)
    login(setter).post(thread_url(lead, "next-action/"), {"title": "Call back", "due_at": "2031-03-04T10:00"})
    assert login(setter).post(thread_url(lead, "reassign/"), {"owner": sara.pk}).status_code == 403

    response = login(manager).post(thread_url(lead, "reassign/"), {"owner": sara.pk, "reason": "Sara speaks Spanish"})
    assert response.status_code == 302
    lead.refresh_from_db()
    assert lead.owner_id == sara.pk
    assert Task.objects.get(lead=lead, kind="next_action", status="open").owner_id == sara.pk
    assert Receipt.objects.filter(lead=lead, action="lead.owner_changed", actor="mia").exists()


def test_an_action_sent_by_htmx_answers_204_with_its_events(business, setter):
    lead = make_lead(business, setter)
    response = login(setter).post(thread_url(lead, "notes/"), {"body": "Dog in the yard"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 204
    events = json.loads(response["HX-Trigger"])
    assert events == {"workspace-changed": True, "workspace-flash": {"level": "success", "text": "Note added."}}
    refused = login(setter).post(thread_url(lead, "notes/"), {"body": ""}, HTTP_HX_REQUEST="true")
    assert json.loads(refused["HX-Trigger"])["workspace-flash"]["level"] == "error"


# ------------------------------------------------------------------ automation


def test_the_thread_shows_the_paths_next_steps_and_the_hold_stops_it(business, setter):
    Source.objects.create(
        business=business, key="main-line", provider="twilio", config={"phone_number": "+13125550100"}
    )
    MessageTemplate.objects.create(
        business=business, key="nudge_sms", channel="sms", approved=True, body="Hi {first_name}, still need help?"
    )
    Sequence.objects.create(business=business, key="no_reply", trigger="no_reply", steps=NO_REPLY_STEPS[:2])
    lead = make_lead(business, setter)
    enrollment = enrollment_start(lead, "no_reply", actor="test")
    assert enrollment is not None

    page = login(setter).get(thread_url(lead)).content.decode()
    assert 'id="planned-steps"' in page and "Hi Rosa, still need help?" in page
    assert "Gate now: would go out (dry run)" in page and "Gate now: a task for a person" in page
    assert "stops on a reply, booking, sale, opt-out" in page

    login(setter).post(thread_url(lead, "hold/"), {"hold": "1"})
    timers_run_due(now=timezone.now() + timedelta(seconds=1))
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "hold")
    page = login(setter).get(thread_url(lead)).content.decode()
    assert 'id="no-path"' in page and 'id="release-button"' in page


# ------------------------------------------------------------------ live thread


def test_the_thread_answers_204_until_a_delivery_status_or_a_new_message_changes_it(
    business, setter, settings, django_capture_on_commit_callbacks
):
    settings.TWILIO_AUTH_TOKEN = "status-token"
    settings.PUBLIC_BASE_URL = "https://backoffice.example.com"
    lead = make_lead(business, setter)
    sid = "SM" + "c" * 32
    Message.objects.create(
        business=business,
        lead=lead,
        contact=lead.contact,
        direction="out",
        channel="sms",
        status="sent",
        body="On our way",
        to="+12125550147",
        idempotency_key="live-1",
        provider_sid=sid,
        actor="sam",
    )
    client = login(setter)
    page = client.get(thread_url(lead)).content.decode()
    version = page.split("live/?v=")[1].split('"')[0]
    live = thread_url(lead, f"live/?v={version}")
    assert client.get(live).status_code == 204

    params = {"MessageSid": sid, "MessageStatus": "delivered", "To": "+12125550147", "From": "+13125550100"}
    path = "/hooks/twilio/sms/status/"
    signature = RequestValidator("status-token").compute_signature(settings.PUBLIC_BASE_URL + path, params)
    Client().post(
        path, urlencode(params), content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature
    )
    event_process(InboundEvent.objects.get(kind="sms_status").pk)
    changed = client.get(live)
    assert changed.status_code == 200 and "Delivered" in changed.content.decode()
    assert 'hx-swap-oob="true"' in changed.content.decode()


# ------------------------------------------------------------------ queries


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_the_inbox_page_costs_the_same_queries_for_5_or_30_conversations(
    business, setter, manager, django_assert_num_queries
):
    for n in range(5):
        text_in(make_lead(business, setter, n, f"Person{n}"))
    client = login(manager)
    client.get("/app/inbox/")  # the session's first touch aside
    page, live = _queries(client, "/app/inbox/"), _queries(client, "/app/inbox/live/?v=old")
    for n in range(5, 30):
        lead = make_lead(business, setter, n, f"Person{n}")
        text_in(lead)
        note_add(lead, author="sam", body="n")
    with django_assert_num_queries(page):
        client.get("/app/inbox/")
    with django_assert_num_queries(live):
        client.get("/app/inbox/live/", {"v": "old"})


def test_the_thread_page_costs_the_same_queries_for_5_or_30_messages(business, setter, django_assert_num_queries):
    lead = make_lead(business, setter)
    client = login(setter)

    def grow(start: int, end: int) -> None:
        for i in range(start, end):
            text_in(lead, f"Question {i}?")
            client.post(thread_url(lead, "send/"), {"body": f"Answer {i}.", "channel": "sms", "form_key": f"q{i}"})
            note_add(lead, author="sam", body=f"note {i}")
            Call.objects.create(
                business=business,
                lead=lead,
                contact=lead.contact,
                direction="in",
                status="no-answer",
                started_at=timezone.now(),
            )

    grow(0, 2)
    client.get(thread_url(lead))
    few = _queries(client, thread_url(lead))
    grow(2, 15)
    assert Message.objects.filter(lead=lead).count() == 30
    with django_assert_num_queries(few):
        client.get(thread_url(lead))


def test_the_inbox_pages_by_fifty_and_filters_by_source(business, setter):
    site = Source.objects.create(business=business, key="site", provider="website")
    for n in range(51):
        make_lead(business, setter, n, f"Person{n:02d}")
    contact = contact_create(business=business, actor="t", first_name="Webby", phones=["+13125550199"])
    lead_sync.lead_assign(lead_open(contact=contact, actor="t", source=site), setter, actor="t", reason="t")
    client = login(setter)
    first = client.get("/app/inbox/").content.decode()
    assert first.count('<li class="row') == 50 and "Page 1" in first and 'rel="next"' in first
    second = client.get("/app/inbox/", {"page": "2"}).content.decode()
    assert second.count('<li class="row') == 2 and 'rel="prev"' in second
    by_source = client.get("/app/inbox/", {"source": "site"}).content.decode()
    assert "Webby" in by_source and by_source.count('<li class="row') == 1 and 'rel="next"' not in by_source
