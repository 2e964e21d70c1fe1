"""A homeowner fills the hosted form in a real browser; the consent text they
saw is what the ledger keeps."""

from __future__ import annotations

import pytest

from agents.capture.processing import event_process
from crm.models import ConsentState, InboundEvent, Lead, Source
from tests.factories import BusinessFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_homeowner_submits_the_hosted_form_and_the_shown_consent_is_stored(live_server, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air")
    Source.objects.create(
        business=business, key="quote", provider="hosted_form", config={"consent_text": "Acme may text me. STOP ends."}
    )
    page = browser_context.new_page()
    page.goto(f"{live_server.url}/f/quote/")
    assert page.inner_text("#consent-text") == "Acme may text me. STOP ends."
    page.fill("input[name=first_name]", "Rosa")
    page.fill("input[name=phone]", "(212) 555-0147")
    page.fill("textarea[name=message]", "AC blowing warm air")
    page.check("input[name=consent]")
    page.click("button[type=submit]")
    page.wait_for_selector("#thanks")

    event = InboundEvent.objects.get()
    assert event.headers["X-LeadOps-Consent-Text-Shown"] == "Acme may text me. STOP ends."
    assert event_process(event.pk) == "processed"
    lead = Lead.objects.get()
    assert lead.request_text == "AC blowing warm air"
    state = ConsentState.objects.get(contact_point__value="+12125550147", channel="sms")
    assert state.status == "granted"
    assert state.last_event.evidence["text_shown"] == "Acme may text me. STOP ends."
    assert state.last_event.evidence["page_url"].endswith("/f/quote/")
    assert state.last_event.evidence["user_agent"]


def test_a_filled_honeypot_is_thanked_but_nothing_is_stored(live_server, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air")
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    page = browser_context.new_page()
    page.goto(f"{live_server.url}/f/quote/")
    page.fill("input[name=phone]", "2125550147")
    page.eval_on_selector("input[name=website_url]", "el => el.value = 'http://spam.example'")
    page.click("button[type=submit]")
    page.wait_for_selector("#thanks")
    assert not InboundEvent.objects.exists()
