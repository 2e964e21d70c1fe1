"""A business sends only from its own numbers and forwards calls only to
numbers it may call; its intake policy comes from the business file."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from twilio.request_validator import RequestValidator

from agents.outbound.gate import message_send
from crm.models import Business, Contact, Source
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply
from crm.services.consent import consent_record
from tests.factories import UserFactory, lead_create

pytestmark = pytest.mark.django_db

A_LINE = "+13125550100"
B_LINE = "+13125550177"
NOON_NY = datetime(2026, 6, 2, 16, 0, tzinfo=UTC)
BASE = "https://backoffice.example.com"
TOKEN = "sources-token"


def load(text: str) -> Business:
    return business_spec_apply(business_file_parse(text, path="acme.yaml")).business


def file_with(source: str = "", policy: str = "", extra: str = "") -> str:
    return (
        "business: {slug: acme-hvac, name: Acme, timezone: America/Chicago, region: US}\n"
        "sources:\n"
        f'  - {{key: main-line, provider: twilio, phone_number: "{A_LINE}"{source}}}\n'
        f"{policy}{extra}"
    )


def refusal(text: str) -> BusinessFileError:
    with pytest.raises(BusinessFileError) as caught:
        load(text)
    return caught.value


@pytest.fixture
def lines(business: Business, other_business: Business) -> None:
    Source.objects.create(business=business, key="a-line", provider="twilio", config={"phone_number": A_LINE})
    Source.objects.create(business=other_business, key="b-line", provider="twilio", config={"phone_number": B_LINE})


def test_a_contact_sending_number_of_another_business_is_refused_in_the_admin(lines, business):
    contact = lead_create(business).contact
    model_admin = admin.site._registry[Contact]
    request = RequestFactory().post("/")
    request.user = UserFactory.create(username="root", is_superuser=True)
    form_class = model_admin.get_form(request, contact)
    data = {"first_name": contact.first_name, "last_name": contact.last_name, "sticky_from_number": B_LINE}
    form = form_class(data=data, instance=contact)
    assert not form.is_valid()
    assert "is not one of" in form.errors["sticky_from_number"][0] and A_LINE in form.errors["sticky_from_number"][0]
    own = form_class(data={**data, "sticky_from_number": "(312) 555-0100"}, instance=contact)
    assert own.is_valid(), own.errors
    assert own.cleaned_data["sticky_from_number"] == A_LINE


def test_the_gate_never_sends_from_a_number_the_business_does_not_own(lines, business):
    lead = lead_create(business)
    Contact.objects.filter(pk=lead.contact_id).update(sticky_from_number=B_LINE)  # a row poisoned before the check
    consent_record(contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="manual", actor="t")
    lead.contact.refresh_from_db()
    message = message_send(
        lead=lead, channel="sms", body="Hi", actor="t", idempotency_key="k", now=NOON_NY, automated=False
    )
    assert message.from_number == A_LINE
    assert Contact.objects.get(pk=lead.contact_id).sticky_from_number == A_LINE


def test_a_premium_rate_forwarding_number_is_refused_in_the_business_file_with_its_line():
    error = refusal(file_with(source=',\n      forward_to: "+1 900 555 0100"'))
    assert error.line == 4
    assert "forward_to refused" in error.reason and "premium_rate" in error.reason
    assert not Business.objects.filter(slug="acme-hvac").exists()


def test_a_forwarding_number_abroad_is_refused_unless_the_business_contacts_that_country():
    text = file_with(source=', forward_to: "+44 20 7123 4567"')
    assert "GB number" in refusal(text).reason
    business = load(text + "policy: {contact_countries: [US, GB]}\n")
    assert business.contact_countries == ["US", "GB"]


def test_a_twilio_number_of_another_business_is_refused_in_the_business_file(other_business):
    Source.objects.create(business=other_business, key="b-line", provider="twilio", config={"phone_number": A_LINE})
    error = refusal(file_with())
    assert error.line == 3 and "is already in use by another business" in error.reason
    assert "other" not in error.reason.replace("another", ""), "the holder is never named"


def test_the_intake_policy_and_notifications_are_read_from_the_business_file():
    business = load(
        file_with(
            policy="policy:\n  contact_countries: [us, CA]\n  captcha: true\n"
            '  embed_origins: ["https://acme.example"]\n',
            extra='notifications: {slack_webhook_url: "https://hooks.slack.com/services/T/B/X"}\n',
        )
    )
    assert business.contact_countries == ["US", "CA"] and business.captcha_required is True
    assert business.embed_origins == ["https://acme.example"]
    assert business.slack_webhook_url == "https://hooks.slack.com/services/T/B/X"
    assert load(file_with(policy="policy: {contact_countries: [US]}\n")).contact_countries == []


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("policy: {contact_countries: [XX]}\n", "bad country 'XX'"),
        ('policy: {embed_origins: ["https://a.example; script-src *"]}\n', "bad origin"),
        ('policy: {embed_origins: ["https://a.example/page"]}\n', "bad origin"),
        ("policy: {captcha: maybe}\n", "must be true or false"),
        ('notifications: {slack_webhook_url: "javascript:alert(1)"}\n', "must be an http(s) URL"),
        ("notifications: {email: x}\n", "unknown key 'email'"),
    ],
)
def test_a_bad_intake_policy_is_refused_with_its_line(policy, reason):
    error = refusal(file_with(policy=policy))
    assert error.line == 4 and reason in error.reason


def test_a_premium_rate_forward_already_stored_is_never_dialled(settings, business):
    settings.PUBLIC_BASE_URL, settings.TWILIO_AUTH_TOKEN = BASE, TOKEN
    Source.objects.create(
        business=business, key="line", provider="twilio", config={"phone_number": A_LINE, "forward_to": "+19005550100"}
    )
    params = {"CallSid": "CA" + "1" * 32, "From": "+12125550147", "To": A_LINE, "CallStatus": "ringing"}
    signature = RequestValidator(TOKEN).compute_signature(BASE + "/hooks/twilio/voice/", params)
    response = Client().post(
        "/hooks/twilio/voice/",
        urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
    )
    assert response.status_code == 200
    root = ET.fromstring(response.content)  # noqa: S314 - our own answer, not outside input
    assert root.find("Dial") is None and root.find("Hangup") is not None


def test_a_twilio_line_abroad_is_refused_unless_the_business_contacts_that_country():
    text = file_with().replace(A_LINE, "+44 20 7946 0018")
    error = refusal(text)
    assert error.line == 3 and "phone_number +442079460018 is a GB number" in error.reason
    assert not Business.objects.filter(slug="acme-hvac").exists()
    business = load(text + "policy: {contact_countries: [US, GB]}\n")
    assert business.sources.get().config["phone_number"] == "+442079460018"
