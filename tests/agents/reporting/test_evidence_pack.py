"""The 10DLC evidence pack: generated for the demo business, and the
pre-flight catching each defect a registration is refused for."""

from __future__ import annotations

import json
import struct
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from agents.reporting.evidence_pack import MISSING, RISKY, evidence_pack
from crm.models import Business, MessageTemplate, Role, Source
from crm.services.business_file import BusinessFileError, business_file_load
from crm.services.consent import consent_record
from crm.services.records import contact_create
from devtools.demo import DEMO_SLUG, demo_load
from tests.factories import BusinessFactory, member_create

pytestmark = pytest.mark.django_db

CONSENT = "By ticking this box you agree that Acme may text you about your request. Reply STOP to opt out."
REGISTRATION = {
    "legal_name": "Acme LLC",
    "website": "https://acme.example",
    "privacy_policy_url": "https://acme.example/privacy",
}


@pytest.fixture
def shop() -> Business:
    """A business whose pack is clean: each test breaks one thing."""
    business = BusinessFactory.create(name="Acme", registration=dict(REGISTRATION))
    Source.objects.create(business=business, key="quote", provider="hosted_form", config={"consent_text": CONSENT})
    MessageTemplate.objects.create(
        business=business,
        key="ack_sms",
        channel="sms",
        approved=True,
        body="Hi {first_name}, Acme here. Reply STOP to opt out.",
    )
    contact = contact_create(business=business, actor="t", first_name="Eve", phones=["+13125550177"])
    consent_record(
        contact_point=contact.points.get(),
        channel="sms",
        granted=True,
        basis="form_disclosure",
        actor="t",
        evidence={"text_shown": CONSENT, "page_url": "https://acme.example/quote"},
    )
    return business


def findings(business: Business) -> set[tuple[str, str, str]]:
    pack = evidence_pack(business, now=timezone.now(), base_url="https://leadops.example")
    return {(f.level, f.what, f.why) for f in pack.findings}


def test_a_clean_pack_has_no_findings(shop: Business) -> None:
    assert findings(shop) == set()


def test_the_demo_pack_holds_what_a_registration_asks_for_and_masks_numbers() -> None:
    demo_load()
    business = Business.objects.get(slug=DEMO_SLUG)

    pack = evidence_pack(business, now=timezone.now(), base_url="https://leadops.example")
    data = pack.as_json()

    assert data["business"]["legal_name"] == "Acme Heating & Air LLC"
    assert data["business"]["privacy_policy_url"] == "https://acme-hvac.example/privacy"
    quote = next(f for f in data["forms"] if f["source"] == "quote")
    assert "Reply STOP" in quote["consent_text"] and quote["url"] == "https://leadops.example/f/quote/"
    # A form on the business's own site: the words the people who opted in there saw.
    assert next(f for f in data["forms"] if f["source"] == "site")["consent_text"]
    keys = {s["template"] for s in data["samples"]}
    assert "ack_sms" in keys and all("{" not in s["body"] for s in data["samples"])
    assert data["stop_help"]["opt_out"].startswith("Acme Heating & Air:") and "STOP" in data["stop_help"]["help"]
    assert sum(day["texts"] for day in data["volume"]) > 0
    assert data["consent"] and all(c["phone"].startswith("•") and c["text"] for c in data["consent"])
    assert "+1312555" not in json.dumps(data)  # no full number leaves in the pack
    # The demo's one realistic defect: the no-show text does not say who is texting.
    assert [(f["level"], f["what"]) for f in data["findings"]] == [(RISKY, "template no_show_sms")]


@pytest.mark.parametrize("key", sorted(REGISTRATION))
def test_a_business_without_its_registration_details_is_missing_them(shop: Business, key: str) -> None:
    shop.registration = {k: v for k, v in REGISTRATION.items() if k != key}
    shop.save()
    assert {(level, what) for level, what, why in findings(shop) if key in why} == {(MISSING, "business")}


def test_a_form_without_consent_text_is_missing_it(shop: Business) -> None:
    Source.objects.filter(business=shop, key="quote").update(config={})
    Source.objects.create(business=shop, key="site", provider="website")
    assert (MISSING, "form site", "the form shows no consent text next to the phone field") in findings(shop)


def test_consent_text_that_does_not_name_the_business_texts_or_stop_is_risky(shop: Business) -> None:
    Source.objects.filter(business=shop, key="quote").update(config={"consent_text": "I agree to be contacted."})
    found = {why for level, what, why in findings(shop) if what == "form quote" and level == RISKY}
    assert found == {
        "the consent text does not name Acme",
        "the consent text does not say the person will get texts",
        "the consent text does not say how to stop (Reply STOP)",
    }


def test_a_sample_without_the_business_name_is_risky(shop: Business) -> None:
    MessageTemplate.objects.create(
        business=shop, key="nudge_sms", channel="sms", approved=True, body="Still need help? Reply STOP to opt out."
    )
    assert findings(shop) == {(RISKY, "template nudge_sms", "the sample does not say it is Acme texting")}


def test_no_sample_with_opt_out_language_is_risky(shop: Business) -> None:
    MessageTemplate.objects.filter(business=shop).update(body="Hi {first_name}, Acme here.")
    assert findings(shop) == {(RISKY, "templates", "no sample says how to opt out (Reply STOP)")}


@pytest.mark.parametrize("link", ["https://bit.ly/3abcd", "tinyurl.com/acme-book", "https://rb.gy/x1y2"])
def test_a_link_shortener_in_a_sample_is_risky(shop: Business, link: str) -> None:
    MessageTemplate.objects.filter(business=shop).update(body=f"Acme: book here {link} Reply STOP to opt out.")
    assert findings(shop) == {(RISKY, "template ack_sms", "the sample uses a link shortener: carriers filter them")}


def test_an_unapproved_template_is_no_sample(shop: Business) -> None:
    MessageTemplate.objects.create(business=shop, key="draft_sms", channel="sms", approved=False, body="bit.ly/x")
    assert findings(shop) == set()


def test_no_consent_on_record_is_risky() -> None:
    business = BusinessFactory.create(name="Acme", registration=dict(REGISTRATION))
    Source.objects.create(business=business, key="quote", provider="hosted_form", config={"consent_text": CONSENT})
    MessageTemplate.objects.create(business=business, key="ack_sms", channel="sms", approved=True, body="Acme: STOP")
    assert findings(business) == {(RISKY, "consent", "no SMS consent on record to show as opt-in evidence")}


def test_the_command_writes_the_json_and_fails_while_something_is_missing(shop: Business, tmp_path: Path) -> None:
    out = StringIO()
    call_command("evidence_pack", shop.slug, "--out", str(tmp_path), stdout=out)
    written = json.loads((tmp_path / f"{shop.slug}-10dlc-evidence.json").read_text())
    assert written["business"]["legal_name"] == "Acme LLC" and "nothing missing" in out.getvalue()

    shop.registration = {}
    shop.save()
    with pytest.raises(CommandError, match="fix what is missing first"):
        call_command("evidence_pack", shop.slug, "--out", str(tmp_path), stdout=StringIO())


def test_the_command_prints_the_pack_as_a_pdf_with_chromium(shop: Business, tmp_path: Path) -> None:
    out = StringIO()

    call_command("evidence_pack", shop.slug, "--out", str(tmp_path), "--pdf", stdout=out)

    pdf = tmp_path / f"{shop.slug}-10dlc-evidence.pdf"
    assert pdf.read_bytes().startswith(b"%PDF-") and pdf.stat().st_size > 10_000
    assert str(pdf) in out.getvalue()


def test_the_page_shows_the_preflight_to_leaders_and_refuses_a_setter(shop: Business) -> None:
    MessageTemplate.objects.filter(business=shop).update(body="Hi {first_name}. Reply STOP to opt out.")
    owner, setter = member_create(shop, Role.OWNER, username="olivia"), member_create(shop, Role.SETTER, username="sam")
    client = Client()
    client.force_login(owner.user)

    page = client.get("/admin/compliance/evidence/")
    html = page.content.decode()
    assert page.status_code == 200 and 'id="preflight"' in html and "the sample does not say it is Acme texting" in html
    download = client.get("/admin/compliance/evidence/", {"format": "json"})
    assert download["Content-Type"] == "application/json" and json.loads(download.content)["findings"]

    client.force_login(setter.user)
    assert client.get("/admin/compliance/evidence/").status_code == 403


def test_the_business_file_refuses_a_website_that_is_not_https(tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(
        "business:\n  slug: shop\n  name: Shop\n  timezone: America/Chicago\n  website: http://shop.example\n"
    )
    with pytest.raises(BusinessFileError, match="website must be a public https:// address"):
        business_file_load(path)


@pytest.mark.django_db(transaction=True)
def test_the_command_takes_the_hosted_form_as_a_phone_shows_it(
    shop: Business, tmp_path: Path, live_server: Any, settings: Any
) -> None:
    settings.PUBLIC_BASE_URL = live_server.url
    out = StringIO()

    call_command("evidence_pack", shop.slug, "--out", str(tmp_path), "--pdf", "--form-screenshots", stdout=out)

    shot = tmp_path / f"{shop.slug}-form-quote.png"
    head = shot.read_bytes()[:24]
    assert head.startswith(b"\x89PNG\r\n\x1a\n")
    assert struct.unpack(">II", head[16:24]) == (430, 932)  # a phone's width
    pack = json.loads((tmp_path / f"{shop.slug}-10dlc-evidence.json").read_text())
    assert [f["screenshot"] for f in pack["forms"] if f["source"] == "quote"] == [shot.name]
    with_shot = (tmp_path / f"{shop.slug}-10dlc-evidence.pdf").stat().st_size
    call_command("evidence_pack", shop.slug, "--out", str(tmp_path), "--pdf", stdout=StringIO())
    assert with_shot > (tmp_path / f"{shop.slug}-10dlc-evidence.pdf").stat().st_size + 5_000  # the image is in it


def test_a_form_the_server_does_not_serve_is_said_not_faked(shop: Business, tmp_path: Path, settings: Any) -> None:
    settings.PUBLIC_BASE_URL = "http://127.0.0.1:9"  # nothing listens there
    err = StringIO()

    folder = str(tmp_path)
    call_command("evidence_pack", shop.slug, "--out", folder, "--form-screenshots", stdout=StringIO(), stderr=err)

    assert "form quote: no screenshot: http://127.0.0.1:9/f/quote/ cannot be reached" in err.getvalue()
    assert not list(tmp_path.glob("*.png"))
    pack = json.loads((tmp_path / f"{shop.slug}-10dlc-evidence.json").read_text())
    assert {f["screenshot"] for f in pack["forms"]} == {""}
