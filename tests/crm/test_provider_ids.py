"""A provider's identifier belongs to one business: a Twilio number, a Meta
page, an Instagram account, a Stripe account… (crm.models.contacts
PROVIDER_IDS). The database refuses a second business's source holding one,
switched off or not; the business file and the Source admin refuse it naming
the setting, never the business that holds it. Follow-up events (a Calendly
cancel, a Stripe payment on a connected account) reach only the business
whose source accepted them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from agents.capture.base import PaymentHints
from agents.capture.providers.stripe import StripeMoney
from agents.revenue.stripe import BusinessUnknown, business_for
from crm.models import Appointment, Business, InboundEvent, Role, Source
from tests.factories import BusinessFactory, member_create
from tests.helpers.booking import owned_lead

pytestmark = pytest.mark.django_db

NUMBER = "+13125550100"
PAGE = "100000000000001"


@pytest.fixture
def victim(db: None) -> Business:
    return BusinessFactory.create(slug="victim", name="Victim Plumbing")


@pytest.fixture
def claimer(db: None) -> Business:
    return BusinessFactory.create(slug="claimer", name="Claimer Heating")


@pytest.mark.parametrize(
    ("provider", "config"),
    [
        ("twilio", {"phone_number": NUMBER}),
        ("twilio", {"account_sid": "AC" + "1" * 32}),
        ("twilio", {"messaging_service_sid": "MG" + "2" * 32}),
        ("meta", {"page_id": PAGE}),
        ("instagram", {"account_id": "17841400000000001"}),
        ("calendly", {"organization": "https://api.calendly.com/organizations/ORG1"}),
        ("typeform", {"form_id": "abc123"}),
        ("stripe", {"account_id": "acct_1Victim"}),
    ],
)
def test_the_database_refuses_a_second_business_holding_a_providers_id(victim, claimer, provider, config):
    Source.objects.create(business=victim, key="theirs", provider=provider, config=config, is_active=False)
    # The victim's own second source may share it (two numbers on one account, a re-created source).
    Source.objects.create(business=victim, key="theirs-too", provider=provider, config=config)
    with pytest.raises(IntegrityError), transaction.atomic():
        Source.objects.create(business=claimer, key="mine", provider=provider, config=config)


def test_a_page_id_written_as_a_number_is_the_same_page(victim, claimer):
    Source.objects.create(business=victim, key="fb", provider="meta", config={"page_id": PAGE})
    with pytest.raises(IntegrityError), transaction.atomic():
        Source.objects.create(business=claimer, key="fb2", provider="meta", config={"page_id": int(PAGE)})


FILE = """\
business:
  slug: claimer
  name: Claimer Heating
  timezone: America/Chicago
sources:
  - {key: fb-claim, provider: meta, page_id: "100000000000001"}
"""


def test_the_business_file_refuses_another_businesss_page_naming_the_setting_not_the_business(victim, tmp_path: Path):
    Source.objects.create(business=victim, key="fb", provider="meta", config={"page_id": PAGE}, is_active=False)
    path = tmp_path / "claimer.yaml"
    path.write_text(FILE, encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        call_command("load_business", str(path))
    message = str(refused.value)
    assert "line 6" in message and f"page_id {PAGE} is already in use by another business" in message
    assert "victim" not in message.lower()
    assert not Source.objects.filter(key="fb-claim").exists()


def test_a_source_key_of_another_business_is_refused_without_its_name(victim, tmp_path: Path):
    Source.objects.create(business=victim, key="fb-claim", provider="website", secret="theirs")
    path = tmp_path / "claimer.yaml"
    path.write_text(FILE.replace('page_id: "100000000000001"', 'page_id: "200"'), encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        call_command("load_business", str(path))
    assert "source key 'fb-claim' is already in use by another business" in str(refused.value)
    assert "victim" not in str(refused.value).lower()


def test_the_source_admin_refuses_another_businesss_number_naming_the_setting(victim, claimer):
    Source.objects.create(business=victim, key="line", provider="twilio", config={"phone_number": NUMBER})
    owner = member_create(claimer, Role.OWNER, username="cleo")
    client = Client()
    client.force_login(owner.user)
    response = client.post(
        "/admin/crm/source/add/",
        {
            "business": claimer.pk,
            "key": "stolen-line",
            "provider": "twilio",
            "config": json.dumps({"phone_number": NUMBER}),
            "is_active": "on",
        },
    )
    page = response.content.decode()
    assert response.status_code == 200, "the form comes back with the refusal"
    assert f"phone_number {NUMBER} is already in use by another business." in page
    assert "Victim" not in page and not Source.objects.filter(key="stolen-line").exists()


# --- follow-up events stay in the business that accepted them ------------------


def test_a_calendly_cancel_accepted_for_one_business_never_cancels_anothers_visit(victim, claimer):
    from agents.capture.processing import event_process
    from tests.agents.booking.test_calendly import CANCELED, INVITEE

    setter = member_create(victim, Role.SETTER, username="vic")
    lead = owned_lead(victim, setter, email="jordan.sample@example.com")
    appointment = Appointment.objects.create(
        business=victim,
        lead=lead,
        provider="calendly",
        external_id=INVITEE,
        starts_at=datetime(2027, 3, 17, 15, tzinfo=UTC),
        ends_at=datetime(2027, 3, 17, 17, tzinfo=UTC),
    )
    # The claimer signs its own events (its source has its own key): it names the victim's invitee.
    source = Source.objects.create(business=claimer, key="cal-claim", provider="calendly", secret="claimer-key")
    event = InboundEvent.objects.create(
        business=claimer,
        source=source,
        provider="calendly",
        kind="invitee.canceled",
        external_id=f"invitee.canceled:{INVITEE}",
        body=CANCELED,
        signature_ok=True,
        received_at=timezone.now(),
    )
    event_process(event.pk)
    appointment.refresh_from_db()
    assert appointment.status == Appointment.Status.SCHEDULED


def test_a_stripe_payment_on_one_businesss_account_cannot_be_filed_as_anothers(victim, claimer):
    Source.objects.create(business=claimer, key="pay", provider="stripe", config={"account_id": "acct_1Claimer"})
    money = StripeMoney(
        kind="payment_intent.succeeded",
        payment_key="pi_1",
        charge_id="ch_1",
        amount=Decimal("150.00"),
        currency="USD",
        paid_at=datetime(2026, 12, 1, tzinfo=UTC),
        hints=PaymentHints(metadata={"business": "victim"}),
        account="acct_1Claimer",
    )
    with pytest.raises(BusinessUnknown, match="names another business"):
        business_for(money)
    money.hints.metadata["business"] = "claimer"
    assert business_for(money) == claimer


# --- a provider's id means something inside one business -------------------------------


def _calendly_post(key: str, source_key: str, body: bytes):
    from agents.capture.providers.calendly import calendly_signature

    signed = calendly_signature(key, body, int(timezone.now().timestamp()))
    return Client().post(
        f"/hooks/calendly/{source_key}/",
        data=body,
        content_type="application/json",
        headers={"Calendly-Webhook-Signature": signed},
    )


def test_a_business_signing_its_own_events_cannot_preempt_anothers_booking(
    victim, claimer, django_capture_on_commit_callbacks
):
    """Each business signs its Calendly deliveries with its own key. Repeats
    were judged across every business: the claimer, knowing an invitee's
    address (its own booking with the victim), posted that booking to its
    own endpoint first; the victim's real delivery was then "a repeat" and
    dropped, and its visit never booked."""
    from tests.agents.booking.test_calendly import CREATED, EMAIL, INVITEE
    from tests.helpers.capture import run_queued_events

    Source.objects.create(business=victim, key="cal-v", provider="calendly", secret="victim-key")
    Source.objects.create(business=claimer, key="cal-c", provider="calendly", secret="claimer-key")
    victims_lead = owned_lead(victim, member_create(victim, Role.SETTER, username="vic"), email=EMAIL)
    owned_lead(claimer, member_create(claimer, Role.SETTER, username="cla"), email=EMAIL)

    with django_capture_on_commit_callbacks(execute=True):
        first = _calendly_post("claimer-key", "cal-c", CREATED)
        second = _calendly_post("victim-key", "cal-v", CREATED)
    assert first.status_code == second.status_code == 200
    assert (first.json()["duplicate"], second.json()["duplicate"]) == (False, False)
    assert run_queued_events() == ["processed", "processed"]

    booked = Appointment.objects.get(business=victim, external_id=INVITEE)
    assert booked.lead == victims_lead
    assert Appointment.objects.get(business=claimer, external_id=INVITEE).lead.business == claimer
    # A true repeat on the victim's own endpoint is still one event.
    assert _calendly_post("victim-key", "cal-v", CREATED).json()["duplicate"] is True


def test_two_businesses_may_record_the_same_payment_reference(victim, claimer):
    """A manual payment's reference is what the contractor typed ("INV-1001"):
    the second business to use one was refused by a constraint across all."""
    from agents.revenue.payments import payment_manual_record

    payments = [
        payment_manual_record(
            lead=owned_lead(business, member_create(business, Role.SETTER, username=f"s-{business.slug}")),
            amount=Decimal("150.00"),
            currency="USD",
            received_at=timezone.now(),
            actor="test",
            reference="INV-1001",
        )
        for business in (victim, claimer)
    ]
    assert [(p.business, p.external_id) for p in payments] == [(victim, "INV-1001"), (claimer, "INV-1001")]
