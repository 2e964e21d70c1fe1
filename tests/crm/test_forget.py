"""Forgetting a person: their data gone from every table, the records, money
and receipt chain intact; the command and the owner-only admin action."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.reporting.call_scoring import call_transcript_set
from approvals.services import approval_request_open
from crm.models import (
    Business,
    Call,
    Contact,
    Estimate,
    Invoice,
    Lead,
    Payment,
    Receipt,
    ReceiptPersonalData,
    Role,
    Source,
    TeamMember,
)
from crm.selectors import lead_timeline
from crm.services.forget import contact_forget
from crm.services.receipts import receipts_verify
from crm.services.records import estimate_record, invoice_record, payment_record, task_create
from tests.factories import lead_create, member_create
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

PHONE, EMAIL = "+12125550147", "rosa.diaz@example.com"
FORM = {
    "first_name": "Rosa",
    "last_name": "Diaz",
    "phone": "(212) 555-0147",
    "email": "Rosa.Diaz@Example.com",
    "postal_code": "60601",
    "address": "12 Quetzal Lane",
    "message": "Furnace makes a banging noise, ask for Rosa",
    "consent": True,
    "consent_text": "You agree to calls and texts from Acme.",
    "page_url": "https://acme.example/quote?email=rosa.diaz%40example.com",
    "utm_source": "google",
    "utm_campaign": "fall-tuneup",
    "gclid": "Cj0KCQ-abc",
    "favourite_colour": "teal",
}
BASE_URL, TOKEN, LINE = "https://backoffice.example.com", "twilio-test-token-0123456789", "+13125550100"
# What must be found nowhere afterwards (searched case-insensitively).
NEEDLES = ["2125550147", "555-0147", "rosa.diaz", "rosa", "diaz", "quetzal", "banging", "198.51.100.23", "RosaPhone"]


@dataclass
class History:
    business: Business
    contact: Contact
    lead: Lead


@pytest.fixture
def history(business: Business, settings: Any, django_capture_on_commit_callbacks: Any) -> History:
    """A person who filled in the website form, texted, was called, got an
    estimate, an invoice and paid, and was the subject of an approval."""
    settings.PUBLIC_BASE_URL, settings.TWILIO_AUTH_TOKEN = BASE_URL, TOKEN
    Source.objects.create(business=business, key="site", provider="website", secret="site-secret-123")
    Source.objects.create(business=business, key="line", provider="twilio", config={"phone_number": LINE})
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/hooks/forms/site/",
            data=json.dumps(FORM).encode(),
            content_type="application/json",
            HTTP_AUTHORIZATION="Bearer site-secret-123",
            REMOTE_ADDR="198.51.100.23",
            HTTP_USER_AGENT="RosaPhone/1.0",
        )
    assert response.status_code == 200
    run_queued_events()
    text = {"MessageSid": "SM" + "7" * 32, "From": PHONE, "To": LINE, "Body": "Rosa here, is Tuesday ok?"}
    signature = RequestValidator(TOKEN).compute_signature(BASE_URL + "/hooks/twilio/sms/", text)
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/hooks/twilio/sms/",
            data=urlencode(text),
            content_type="application/x-www-form-urlencoded",
            HTTP_X_TWILIO_SIGNATURE=signature,
        )
    assert response.status_code == 200
    run_queued_events()
    lead = Lead.objects.get()
    contact = lead.contact
    assert contact.name == "Rosa Diaz" and lead.messages.filter(direction="in").exists()
    now = timezone.now()
    # A follow-up: the lead's next action is already the first contact the
    # new-lead step set (its title names her too).
    task_create(lead=lead, title="Call Rosa Diaz back about the furnace", due_at=now, actor="sam", kind="follow_up")
    call = Call.objects.create(
        business=business,
        lead=lead,
        contact=contact,
        direction="in",
        status="completed",
        from_number=PHONE,
        to=LINE,
        provider_sid="CA" + "7" * 32,
        started_at=now,
        recording_url="https://api.twilio.com/rec/RE7",
    )
    call_transcript_set(
        call,
        "Hi, this is Rosa Diaz, I guarantee you a discount, my number is 212 555 0147",
        actor="sam",
        source="import",
    )
    estimate_record(lead=lead, amount=Decimal("640.00"), currency="USD", actor="sam", description="Furnace for Rosa")
    invoice_record(lead=lead, amount=Decimal("640.00"), currency="USD", actor="sam")
    payment_record(lead=lead, amount=Decimal("640.00"), currency="USD", actor="sam", received_at=now)
    approval_request_open(
        business=business,
        kind="message_draft",
        summary=f"Reply to Rosa Diaz at {PHONE}",
        proposed_by="agent:setter",
        lead=lead,
        payload={"body": "Hi Rosa, Tuesday at 9 works."},
    )
    return History(business, contact, lead)


def leftovers(needles: list[str] = NEEDLES) -> list[str]:
    """Every text, JSON and binary column of every table that still holds a
    needle: read from the catalogue, so a new column cannot hide."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type IN ('text', 'character varying', 'jsonb', 'json', "
            "'bytea')"
            " AND table_name IN (SELECT table_name FROM information_schema.tables"
            "   WHERE table_schema = current_schema() AND table_type = 'BASE TABLE')"
        )
        columns = cursor.fetchall()
        found = []
        for table, column, kind in columns:
            text = f"encode(\"{column}\", 'escape')" if kind == "bytea" else f'"{column}"::text'
            for needle in needles:
                cursor.execute(f'SELECT count(*) FROM "{table}" WHERE {text} ILIKE %s', [f"%{needle}%"])
                if cursor.fetchone()[0]:
                    found.append(f"{table}.{column} holds {needle!r}")
        return found


def test_before_forgetting_the_person_is_found_in_many_tables(history: History) -> None:
    tables = {line.split(".")[0] for line in leftovers()}

    assert {
        "crm_contact",
        "crm_contactpoint",
        "crm_message",
        "crm_call",
        "crm_inboundevent",
        "crm_consentevent",
        "crm_receiptpersonaldata",
        "crm_task",
        "approvals_approvalrequest",
    } <= tables


def test_a_forgotten_contact_is_gone_from_every_column_of_every_table(history: History) -> None:
    call_command("forget_contact", history.contact.public_id, "--reason", "asked by phone", stdout=StringIO())

    assert leftovers() == []


def test_the_receipt_chain_still_verifies_after_forgetting(history: History) -> None:
    assert ReceiptPersonalData.objects.filter(receipt__lead=history.lead).exists()

    contact_forget(history.contact, actor="olivia", reason="asked by email")

    assert receipts_verify() is None
    out = StringIO()
    call_command("verify_receipts", stdout=out)
    assert out.getvalue().startswith("receipt chain is whole")
    assert not ReceiptPersonalData.objects.filter(receipt__lead=history.lead).exists()


def test_records_stages_and_money_totals_are_kept(history: History) -> None:
    def totals() -> tuple[Any, ...]:
        return (
            Payment.objects.aggregate(s=Sum("amount"))["s"],
            Invoice.objects.aggregate(s=Sum("amount"))["s"],
            Estimate.objects.aggregate(s=Sum("amount"))["s"],
            Lead.objects.get().stage,
            Receipt.objects.count(),
            history.lead.messages.count(),
            history.lead.touches.count(),
        )

    before = totals()
    contact_forget(history.contact, actor="olivia")
    after = totals()

    assert after[:4] == before[:4] == (Decimal("640.00"), Decimal("640.00"), Decimal("640.00"), before[3])
    assert after[4] == before[4] + 1  # the forget receipt
    assert after[5:] == before[5:]
    touch = history.lead.touches.get()
    assert touch.utm == {"source": "google", "campaign": "fall-tuneup"} and touch.gclid == ""
    assert touch.landing_page == "https://acme.example/quote"


def test_the_forget_receipt_counts_what_was_erased_and_why_without_personal_data(history: History) -> None:
    result = contact_forget(
        history.contact, actor="olivia", reason="Rosa Diaz asked by email from rosa.diaz@example.com"
    )

    receipt = Receipt.objects.get(action="contact.forgotten")
    assert receipt == result.receipt and receipt.subject == history.contact.public_id
    assert receipt.reason == "[erased] asked by email from [erased]"
    erased = receipt.after["erased"]
    assert erased["crm_contactpoint"] == 2 and erased["crm_message"] >= 1 and erased["crm_inboundevent"] >= 2
    assert erased["crm_receiptpersonaldata"] > 0 and erased["approvals_approvalrequest"] == 1
    assert not ReceiptPersonalData.objects.filter(receipt=receipt).exists()


def test_readers_show_erased_in_place_of_the_forgotten_values(history: History, owner: TeamMember) -> None:
    client = Client()
    client.force_login(owner.user)
    url = f"/api/v1/leads/{history.lead.public_id}/receipts/"
    shown = json.dumps(client.get(url).json())
    assert "Rosa" in shown and PHONE in shown

    contact_forget(history.contact, actor="olivia")

    shown = json.dumps(client.get(url).json())
    assert "Rosa" not in shown and PHONE not in shown and "[erased]" in shown


def test_the_receipt_admin_and_the_timeline_show_the_values_then_erased(history: History, owner: TeamMember) -> None:
    client = Client()
    client.force_login(owner.user)
    created = Receipt.objects.get(action="contact.created")
    page = f"/admin/crm/receipt/{created.pk}/change/"

    def receipt_details() -> str:
        return " ".join(e.detail for e in lead_timeline(Lead.objects.get()) if e.kind == "receipt")

    assert "Rosa Diaz" in client.get(page).content.decode() and "Rosa" in receipt_details()

    contact_forget(history.contact, actor="olivia")

    shown = client.get(page).content.decode()
    assert "Rosa" not in shown and "[erased]" in shown
    assert "Rosa" not in receipt_details() and "[erased]" in receipt_details()


def test_forgetting_twice_erases_nothing_more_and_writes_no_second_receipt(history: History) -> None:
    contact_forget(history.contact, actor="olivia")

    again = contact_forget(history.contact, actor="olivia")

    assert again.counts == {} and again.receipt is None
    assert Receipt.objects.filter(action="contact.forgotten").count() == 1


def test_another_person_with_the_same_first_name_keeps_their_data(history: History) -> None:
    other = lead_create(history.business, first_name="Rosa", last_name="Smith", phone="+13125550177")

    contact_forget(history.contact, actor="olivia")

    other.contact.refresh_from_db()
    assert other.contact.name == "Rosa Smith"
    assert list(other.contact.points.values_list("value", flat=True)) == ["+13125550177"]


def test_a_forgotten_contact_point_is_never_used_again(history: History) -> None:
    contact_forget(history.contact, actor="olivia")

    history.contact.refresh_from_db()
    assert history.contact.automation_paused
    assert not history.contact.points.filter(is_valid=True).exists()


def test_the_command_refuses_an_unknown_id(business: Business) -> None:
    with pytest.raises(CommandError, match="no contact with id 'cont_nobody'"):
        call_command("forget_contact", "cont_nobody", stdout=StringIO())


# The admin action


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olivia")


def _action(client: Client, contact: Contact, **extra: str) -> Any:
    data = {"action": "contact_forget_action", "_selected_action": [str(contact.pk)], **extra}
    return client.post("/admin/crm/contact/", data, follow=True)


def test_the_admin_action_is_refused_to_a_manager(history: History, manager: TeamMember) -> None:
    client = Client()
    client.force_login(manager.user)

    response = _action(client, history.contact, confirm=history.contact.public_id)

    assert "Only an owner of this business may forget a person." in response.content.decode()
    history.contact.refresh_from_db()
    assert history.contact.name == "Rosa Diaz"
    assert not Receipt.objects.filter(action="contact.forgotten").exists()


def test_the_admin_action_asks_the_owner_to_type_the_id(history: History, owner: TeamMember) -> None:
    client = Client()
    client.force_login(owner.user)

    asked = _action(client, history.contact)
    wrong = _action(client, history.contact, confirm="cont_someone_else")

    assert asked.status_code == 200 and "Type the contact&#x27;s id to confirm" in asked.content.decode()
    assert "That is not this contact&#x27;s id" in wrong.content.decode()
    history.contact.refresh_from_db()
    assert history.contact.name == "Rosa Diaz"


def test_the_admin_action_forgets_once_the_owner_types_the_id(history: History, owner: TeamMember) -> None:
    client = Client()
    client.force_login(owner.user)

    response = _action(client, history.contact, confirm=history.contact.public_id, reason="asked in person")

    assert f"Forgot {history.contact.public_id}: " in response.content.decode()
    receipt = Receipt.objects.get(action="contact.forgotten")
    assert (receipt.actor, receipt.reason) == ("olivia", "asked in person")
    assert leftovers() == []
    assert receipts_verify() is None
    assert timezone.now() - receipt.at < timedelta(minutes=1)


def decoded_task_leftovers(needles: list[str] = NEEDLES) -> list[str]:
    """The needles in django-q's rows as a worker would read them: queued
    payloads unsigned and unpickled, finished tasks' arguments and results
    unpickled (the catalogue scan above cannot see into a signed pickle)."""
    from django_q.models import OrmQ, Task
    from django_q.signing import SignedPackage

    texts = [f"ormq {row.pk}: {SignedPackage.loads(row.payload)!r}" for row in OrmQ.objects.all()]
    texts += [f"task {t.name}: {(t.args, t.kwargs, t.result)!r}" for t in Task.objects.all()]
    return [f"{text[:60]}… holds {n!r}" for text in texts for n in needles if n.lower() in text.lower()]


def test_a_forgotten_person_is_in_no_task_queued_or_finished_in_any_format(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    from django_q.models import Task

    from agents.notify import member_notify

    setter = member_create(history.business, Role.SETTER, username="sam", email="sam@example.com")
    with django_capture_on_commit_callbacks(execute=True):  # queued, not yet sent
        member_notify(setter, "New lead", "Rosa Diaz (212) 555-0147 wants a quote", slack=False)
    now = timezone.now()
    Task.objects.create(  # one that ran, kept in the history as django-q keeps it
        id="0" * 32,
        name="notice-ran",
        func="agents.tasks.notice_deliver",
        args=("sam@example.com", "New lead", "rosa.diaz@example.com wrote again", ""),
        kwargs={},
        result=None,
        group="notify",
        started=now,
        stopped=now,
        success=True,
    )
    Task.objects.create(
        id="1" * 32, name="unrelated", func="agents.tasks.alerts", args=(), kwargs={}, started=now, stopped=now
    )
    assert decoded_task_leftovers(), "the person is in the task rows before"

    result = contact_forget(history.contact, actor="olivia", reason="asked")

    assert decoded_task_leftovers() == []
    assert result.counts["django_q_task"] == 1 and result.counts["django_q_ormq"] >= 1
    assert Task.objects.filter(name="unrelated").exists(), "only the rows that name the person go"
    assert leftovers() == []


@pytest.mark.parametrize("mode", ["live", "dry_run"])
def test_twilio_is_asked_to_redact_the_texts_and_delete_the_recordings_unless_dry_run(
    history: History, settings: Any, django_capture_on_commit_callbacks: Any, mode: str
) -> None:
    from django_q.models import OrmQ

    from agents import tasks
    from scripts.fake_twilio import FakeTwilio

    account, text_sid, recording_sid = "AC" + "a" * 32, "SM" + "7" * 32, "RE" + "7" * 32
    twilio = FakeTwilio({account: TOKEN}).start()
    try:
        settings.TWILIO_API_BASE_URL, settings.TWILIO_ACCOUNT_SID, settings.SEND_MODE = twilio.url, account, mode
        # What Twilio holds of her: the text she sent, the call's recording.
        twilio.sent[account] = [{"sid": text_sid, "body": "Rosa here, is Tuesday ok?", "to": LINE, "from": PHONE}]
        twilio.recordings[recording_sid] = "CA" + "7" * 32
        Call.objects.filter(lead=history.lead).update(
            recording_url=f"https://api.twilio.com/2010-04-01/Accounts/{account}/Recordings/{recording_sid}"
        )
        OrmQ.objects.all().delete()

        with django_capture_on_commit_callbacks(execute=True):
            result = contact_forget(history.contact, actor="olivia", reason="asked")

        assert (result.counts["twilio_message_bodies"], result.counts["twilio_recordings"]) == (1, 1)
        [queued] = [q.task for q in OrmQ.objects.all() if q.task["func"] == "agents.tasks.twilio_copies_erase"]
        assert not decoded_task_leftovers(), "the task carries sids, never the person"
        done = tasks.twilio_copies_erase(*queued["args"])
        if mode == "live":
            assert done == {"messages": 1, "recordings": 1, "gone": 0, "dry_run": False}
            assert twilio.sent[account][0]["body"] == "" and twilio.recordings == {}
        else:
            assert done["dry_run"] and twilio.seen == [], "a dry run asks Twilio nothing"
            assert twilio.recordings == {recording_sid: "CA" + "7" * 32}
    finally:
        twilio.stop()
