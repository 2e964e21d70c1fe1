"""The setters' workspace in a real browser: a reply worked from the inbox
with the keyboard, a text arriving in an open inbox and thread without a
reload, a thread at a phone's width, times in the viewer's zone, and the
screenshots docs/workspace.md shows."""

from __future__ import annotations

import re
from datetime import time, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.followup.replies import reply_record
from agents.followup.sequences.engine import enrollment_start
from agents.outbound.gate import message_send
from approvals.models import ApprovalRequest
from crm.models import Business, Call, Conversation, Lead, Message, MessageTemplate, Role, Sequence, Source, TeamMember
from crm.services import lead_sync
from crm.services.conversations import note_add
from crm.services.next_action import next_action_set
from crm.services.reached import call_log
from crm.services.records import contact_create, lead_open
from tests.factories import BusinessFactory, member_create
from tests.helpers.capture import run_queued_events
from tests.helpers.followup import NO_REPLY_STEPS, consent_all

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
LINE = "+13125550100"
TWILIO_TOKEN = "workspace-browser-token"
BASE_URL = "https://backoffice.example.com"
# What the tests wait for to appear without a reload: the page polls every
# two or three seconds, and a change must show within five.
LIVE = 5000


@pytest.fixture
def business() -> Business:
    # Quiet hours wide open: what the gate says must not depend on the hour the tests run at.
    business = BusinessFactory.create(
        slug="acme",
        name="Acme Heating & Air",
        timezone="America/Chicago",
        quiet_hours_start=time(0, 0),
        quiet_hours_end=time(23, 59, 59),
    )
    templates = {
        "ack_sms": "Hi {first_name}, this is {business}. We got your request and {owner_first_name} will reach out "
        "shortly. Reply STOP to opt out.",
        "scheduling_sms": "Hi {first_name}, thanks for writing. What day and time work best for a visit?",
        "nudge_sms": "Hi {first_name}, {owner_first_name} from {business} here. Still need help with your request? "
        "Reply STOP to opt out.",
    }
    for key, body in templates.items():
        MessageTemplate.objects.create(business=business, key=key, channel="sms", approved=True, body=body)
    MessageTemplate.objects.create(
        business=business,
        key="details_email",
        channel="email",
        approved=True,
        subject="Your request with {business}",
        body="Hi {first_name}, reply with a good time to call. {owner_first_name}",
    )
    Source.objects.create(business=business, key="main-line", provider="twilio", config={"phone_number": LINE})
    return business


@pytest.fixture
def sam(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam", display_name="Sam Setter")


@pytest.fixture
def twilio(settings) -> None:
    settings.TWILIO_AUTH_TOKEN = TWILIO_TOKEN
    settings.PUBLIC_BASE_URL = BASE_URL


def person(
    business: Business,
    owner: TeamMember | None,
    first: str,
    last: str,
    phone: str,
    *,
    source: str = "",
    channel: str = "form",
    request: str = "",
    ago: timedelta = timedelta(hours=1),
) -> Lead:
    contact = contact_create(
        business=business,
        actor="test",
        first_name=first,
        last_name=last,
        phones=[phone],
        emails=[f"{first}.{last}@example.com".lower()],
    )
    src = Source.objects.filter(business=business, key=source).first() if source else None
    lead = lead_open(
        contact=contact,
        actor="test",
        source=src,
        request_text=request,
        received_at=timezone.now() - ago,
        touch={"channel": channel},
    )
    if owner is not None:
        lead = lead_sync.lead_assign(lead, owner, actor="test", reason="round robin")
    consent_all(lead, at=timezone.now())
    return lead


def text_in(lead: Lead, body: str, ago: timedelta = timedelta(0), channel: str = "sms") -> Message:
    return reply_record(lead, channel=channel, body=body, actor="test", now=timezone.now() - ago)


def text_out(lead: Lead, body: str, actor: str, ago: timedelta, *, automated: bool = False) -> Message:
    return message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=actor,
        idempotency_key=f"test:{lead.public_id}:{body}",
        automated=automated,
        now=timezone.now() - ago,
    )


def sms_webhook(sender: str, body: str, sid: str) -> None:
    """Post the inbound text Twilio would, signed as Twilio signs it, and run
    what the queue holds (no cluster runs in the tests)."""
    params = {
        "AccountSid": "AC00000000000000000000000000000001",
        "MessageSid": sid,
        "SmsSid": sid,
        "From": sender,
        "To": LINE,
        "Body": body,
        "NumMedia": "0",
        "SmsStatus": "received",
    }
    path = "/hooks/twilio/sms/"
    signature = RequestValidator(TWILIO_TOKEN).compute_signature(BASE_URL + path, params)
    response = Client().post(
        path, urlencode(params), content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature
    )
    assert response.status_code == 200, response.content
    assert run_queued_events() == ["processed"]


def log_in(context, live_server, username: str, *, path: str = "/app/inbox/"):
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server.url}/admin/login/?next={path}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{path}")
    return page


def selected(page) -> str:
    return page.get_attribute("#rows .row.is-selected", "data-lead") or ""


# ------------------------------------------------------------------ the keyboard


def test_a_setter_works_a_reply_from_the_inbox_with_the_keyboard(live_server, browser_context, business, sam):
    rosa = person(business, sam, "Rosa", "Diaz", "+12125550147", request="Furnace bangs when it starts up.")
    text_in(rosa, "Can someone come Tuesday morning?", ago=timedelta(minutes=12))
    ahmed = person(business, sam, "Ahmed", "Khan", "+12125550148")
    text_in(ahmed, "Thanks, talk soon!", ago=timedelta(minutes=3))

    page = log_in(browser_context, live_server, "sam")
    assert selected(page) == rosa.public_id, "the one who waited longest is first, and selected"
    page.keyboard.press("j")
    assert selected(page) == ahmed.public_id
    page.keyboard.press("k")
    assert selected(page) == rosa.public_id

    page.keyboard.press("r")
    page.wait_for_url(re.compile(rf"/app/leads/{rosa.public_id}/\?reply=1$"))
    page.wait_for_function("document.activeElement && document.activeElement.id === 'id_body'")
    assert page.input_value("#id_body") == "Hi Rosa, thanks for writing. What day and time work best for a visit?"

    page.keyboard.press("Control+A")
    page.keyboard.type("Thanks Rosa! Which address is the furnace at?")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#send-verdict >> text=Recorded, not sent (dry run)")
    sent = Message.objects.get(lead=rosa, direction="out")
    assert (sent.status, sent.actor, sent.body) == ("dry_run", "sam", "Thanks Rosa! Which address is the furnace at?")
    assert "sent=" not in page.url, "the verdict came inline, without leaving the page"
    # The conversation shows the reply too, without a reload.
    page.wait_for_selector(f"#conversation #{sent.public_id}", timeout=LIVE)

    # A risky edit says it waits for a manager.
    page.keyboard.type("We can do it for $199 tomorrow by 9am, guaranteed.")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#send-verdict >> text=Waiting for approval")
    risky = Message.objects.filter(lead=rosa, direction="out").order_by("-pk").first()
    assert risky.status == "pending_approval"
    assert ApprovalRequest.objects.get(kind="message_draft").payload["message"] == risky.public_id

    # Back to the inbox, and "e" marks the other conversation done.
    page.keyboard.press("Escape")
    page.keyboard.press("u")
    page.wait_for_url("**/app/inbox/")
    # Rosa is answered: Ahmed, still waiting, comes first now.
    assert selected(page) == ahmed.public_id
    page.keyboard.press("e")
    page.wait_for_selector(f'#rows .row[data-lead="{ahmed.public_id}"] .why', state="detached", timeout=LIVE)
    assert Conversation.objects.get(lead=ahmed).awaiting_since is None
    assert "/app/inbox/" in page.url


def test_the_workspace_works_without_javascript(live_server, browser, business, sam):
    rosa = person(business, sam, "Rosa", "Diaz", "+12125550147")
    text_in(rosa, "Can someone come Tuesday morning?", ago=timedelta(minutes=12))
    ahmed = person(business, sam, "Ahmed", "Khan", "+12125550148")
    text_in(ahmed, "Thanks, talk soon!", ago=timedelta(minutes=3))
    context = browser.new_context(java_script_enabled=False)
    try:
        page = log_in(context, live_server, "sam")
        page.check("#needs-reply")
        page.click("#filters button[type=submit]")
        page.wait_for_url("**/app/inbox/?*needs_reply=on*")
        page.click(f'#rows .row[data-lead="{ahmed.public_id}"] .done-form button')
        page.wait_for_selector(".flash >> text=Ahmed Khan: marked done.")
        assert "needs_reply=on" in page.url and page.locator(f'[data-lead="{ahmed.public_id}"]').count() == 0

        page.click(f'#rows .row[data-lead="{rosa.public_id}"] .row-name')
        page.select_option("#template-picker", "nudge_sms")
        page.click("#composer button.nojs-only")
        nudge = "Hi Rosa, Sam from Acme Heating & Air here. Still need help with your request? Reply STOP to opt out."
        assert page.input_value("#id_body") == nudge
        page.click("#send-reply")
        page.wait_for_selector("#send-verdict >> text=Recorded, not sent (dry run)")
        sent = Message.objects.get(lead=rosa, direction="out")
        assert (sent.status, sent.template_key, sent.body) == ("dry_run", "nudge_sms", nudge)
        page.click("#action-note summary")
        page.fill("#id_note_body", "Prefers mornings.")
        page.click("#action-note button[type=submit]")
        page.wait_for_selector(".flash >> text=Note added.")
        assert page.locator("#conversation .note").count() == 1
    finally:
        context.close()


# ------------------------------------------------------------------ live


def test_a_new_inbound_sms_appears_in_an_open_inbox_thread_and_badge_without_a_reload(
    live_server, browser, browser_context, business, sam, twilio
):
    rosa = person(business, sam, "Rosa", "Diaz", "+12125550147")
    member_create(business, Role.MANAGER, username="mia")
    inbox = log_in(browser_context, live_server, "sam")
    inbox.evaluate("window.notReloaded = true")
    admin = browser_context.new_page()
    admin.goto(f"{live_server.url}/admin/")
    admin.wait_for_selector("#nav-inbox")
    # The thread is open for the manager: reading it there leaves Sam's unread count alone.
    managers = browser.new_context()
    try:
        thread = log_in(managers, live_server, "mia", path=f"/app/leads/{rosa.public_id}/")
        thread.evaluate("window.notReloaded = true")
        assert inbox.inner_text("#unread-badge") == ""

        sms_webhook("+12125550147", "Hi, is anyone coming today? The heat is out.", "SM" + "7" * 32)

        inbox.wait_for_selector("#inbox-list >> text=Hi, is anyone coming today?", timeout=LIVE)
        # No heat and "today": the row comes in marked urgent, ahead of every plain wait.
        inbox.wait_for_selector(f'#rows .row.is-urgent[data-lead="{rosa.public_id}"] .why-urgent', timeout=LIVE)
        inbox.wait_for_selector("#unread-badge >> text=1", timeout=LIVE)
        admin.wait_for_selector("#unread-badge >> text=1", timeout=LIVE)
        thread.wait_for_selector("#conversation >> text=Hi, is anyone coming today?", timeout=LIVE)
        assert inbox.evaluate("window.notReloaded") is True and thread.evaluate("window.notReloaded") is True
    finally:
        managers.close()


# ------------------------------------------------------------------ phone width


def test_the_inbox_and_a_thread_at_phone_width_are_one_column_and_reply(live_server, browser, business, sam, shots):
    lead = _living_business(business, sam)["rosa"]
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    try:
        page = log_in(context, live_server, "sam")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, "nothing wider than the phone"
        # The filters fold behind one button: the conversations come first.
        assert not page.is_visible("#filter-channel")
        rows_top = page.eval_on_selector("#rows", "e => e.getBoundingClientRect().top")
        assert rows_top < 844 * 0.4, "the filters take no more than a glance of the screen"
        page.screenshot(path=str(shots / "inbox-phone.png"))
        page.click(".filters-toggle")
        assert page.is_visible("#filter-channel")
        page.click(".filters-toggle")
        page.click(f'#rows .row[data-lead="{lead.public_id}"] .row-name')
        page.wait_for_url(f"**/app/leads/{lead.public_id}/")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, "nothing wider than the phone"
        boxes = [page.locator(sel).bounding_box() for sel in ("#thread-head", ".convo-scroll", "#composer", "#glance")]
        assert all(b is not None and b["width"] <= 390 for b in boxes)
        assert [round(b["x"]) for b in boxes[1:]] == [round(boxes[1]["x"])] * 3, "one column"
        assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"] < boxes[3]["y"]
        page.screenshot(path=str(shots / "thread-phone.png"), full_page=True)

        page.fill("#id_body", "Thanks Rosa! Which address is the furnace at?")
        page.click("#send-reply")
        page.wait_for_selector("#send-verdict >> text=Recorded, not sent (dry run)")
    finally:
        context.close()


# ------------------------------------------------------------------ time zones


def test_times_are_shown_in_the_viewers_zone_with_the_zone_named(live_server, browser_context, business, sam):
    lead = person(business, sam, "Rosa", "Diaz", "+12125550147")
    # 23:30 UTC on a winter day is 5:30 PM in Chicago.
    due = timezone.now().astimezone(ZoneInfo("UTC")).replace(hour=23, minute=30, second=0, microsecond=0)
    due = due + timedelta(days=3)
    lead_sync.lead_set_next_action(lead, "Call back", due, actor="test", reason="test")
    local = due.astimezone(ZoneInfo("America/Chicago"))
    page = log_in(browser_context, live_server, "sam", path=f"/app/leads/{lead.public_id}/")
    shown = page.inner_text("#next-action")
    assert f"{local:%-I}:30 {local:%p} {local.tzname()}" in shown, shown
    assert "America/Chicago" in page.inner_text("#viewer-zone")
    assert "UTC" not in page.inner_text("body")


# ------------------------------------------------------------------ screenshots


def minutes(n: int) -> timedelta:
    return timedelta(minutes=n)


def _living_business(business: Business, sam: TeamMember) -> dict[str, Lead]:
    """A morning's inbox: people writing on every channel, an SLA about to
    pass, an overdue call back, an automated path running."""
    for key, provider in (("gads-main", "google_ads"), ("site", "website"), ("ig", "instagram"), ("tf", "typeform")):
        Source.objects.create(business=business, key=key, provider=provider)
    Sequence.objects.create(business=business, key="no_reply", trigger="no_reply", steps=NO_REPLY_STEPS[:3])

    rosa = person(
        business,
        sam,
        "Rosa",
        "Diaz",
        "+12125550147",
        source="gads-main",
        request="Furnace bangs when it starts up.",
        ago=minutes(200),
    )
    text_out(
        rosa,
        "Hi Rosa, this is Acme Heating & Air. We got your request and Sam will reach out shortly. "
        "Reply STOP to opt out.",
        "agent:first_response",
        minutes(199),
        automated=True,
    )
    call_log(rosa, actor="sam", outcome="no_answer", at=timezone.now() - minutes(170))
    note_add(
        rosa, author="sam", body="Left a voicemail. Her form says mornings are best.", at=timezone.now() - minutes(169)
    )
    text_in(
        rosa,
        "Hi! Sorry I missed your call. It bangs every time the heat kicks on and smells a bit dusty.",
        ago=minutes(14),
    )
    text_in(rosa, "Can someone come Tuesday morning?", ago=minutes(12))
    next_action_set(
        rosa, "Call Rosa back to book a visit", timezone.now() + minutes(60), actor="sam", reason="no answer"
    )

    lucia = person(business, sam, "Lucía", "Fernández", "+12125550149", source="ig", channel="dm", ago=minutes(50))
    text_in(lucia, "Hola, ¿tienen disponibilidad para revisar el aire acondicionado esta semana?", minutes(45), "dm")
    text_out(lucia, "¡Hola Lucía! Sí, ¿qué día le queda mejor?", "sam", minutes(40))
    text_in(lucia, "El jueves por la mañana, por favor.", minutes(9), "dm")

    marcus = person(business, sam, "Marcus", "Lee", "+12125550150", source="ig", channel="dm", ago=minutes(6))
    text_in(marcus, "Do you install ductless mini-splits? Looking for a quote for a 2-bedroom condo.", minutes(5), "dm")

    priya = person(
        business,
        sam,
        "Priya",
        "Patel",
        "+12125550151",
        source="site",
        request="Quote for a new heat pump.",
        ago=minutes(1),
    )
    lead_sync.lead_set_sla(
        priya, timezone.now() + minutes(4), actor="agent:sla_timer", reason="first response in 5 min"
    )

    omar = person(
        business,
        sam,
        "Omar",
        "Haddad",
        "+12125550152",
        source="tf",
        request="Water heater leaking in the basement.",
        ago=minutes(300),
    )
    text_out(omar, "Hi Omar, this is Sam from Acme. Is the leak still active?", "sam", minutes(180))
    lead_sync.lead_set_next_action(
        omar, "Call back about the water heater", timezone.now() - minutes(125), actor="sam", reason="no answer"
    )

    hannah = person(business, sam, "Hannah", "Scott", "+12125550153", channel="call", ago=minutes(25))
    Call.objects.create(
        business=business,
        lead=hannah,
        contact=hannah.contact,
        direction="in",
        status="no-answer",
        from_number="+12125550153",
        to=LINE,
        started_at=timezone.now() - minutes(25),
        duration_seconds=31,
        recording_url="https://api.twilio.com/2010-04-01/Accounts/AC1/Recordings/RE1",
        transcript="Hi, it's Hannah. The thermostat won't reach the set temperature. Please call me back.",
    )
    lead_sync.lead_set_next_action(
        hannah,
        "Call Hannah back (missed call)",
        timezone.now() + minutes(5),
        actor="agent:missed_call",
        reason="missed call",
    )

    diego = person(
        business,
        sam,
        "Diego",
        "Ramirez",
        "+12125550154",
        source="gads-main",
        request="Furnace tune-up before winter.",
        ago=minutes(40),
    )
    text_out(
        diego,
        "Hi Diego, this is Acme Heating & Air. We got your request and Sam will reach out shortly. "
        "Reply STOP to opt out.",
        "agent:first_response",
        minutes(39),
        automated=True,
    )
    enrollment_start(diego, "no_reply", actor="test")

    grace = person(
        business,
        sam,
        "Grace",
        "Kim",
        "+12125550155",
        source="site",
        request="Kitchen drain keeps clogging.",
        ago=timedelta(days=1),
    )
    text_out(grace, "Thanks Grace, you are all set. Reply here if anything changes.", "sam", timedelta(hours=20))
    return {"rosa": rosa, "diego": diego}


def test_screenshots_of_a_living_inbox_and_thread(live_server, browser, business, sam, shots):
    leads = _living_business(business, sam)
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        page = log_in(context, live_server, "sam")
        rows = page.locator("#rows .row")
        assert rows.count() == 8
        assert page.inner_text("#rows .row:first-child .row-name") == "Rosa Diaz"
        assert "waiting 14 min" in page.inner_text("#rows .row:first-child")
        assert page.locator("text=SLA due in").count() == 1 and page.locator("text=overdue 2 h").count() == 1
        page.screenshot(path=str(shots / "inbox.png"), full_page=True)

        page.goto(f"{live_server.url}/app/leads/{leads['rosa'].public_id}/")
        assert "Can someone come Tuesday morning?" in page.inner_text("#conversation")
        assert page.locator("#conversation .note").count() == 1
        page.screenshot(path=str(shots / "thread.png"), full_page=True)

        page.goto(f"{live_server.url}/app/leads/{leads['diego'].public_id}/")
        steps = page.locator("#planned-steps .step")
        assert steps.count() == 3
        assert "Gate now: would go out (dry run)" in steps.first.inner_text()
        page.locator("#automation").screenshot(path=str(shots / "automation.png"))
    finally:
        context.close()
