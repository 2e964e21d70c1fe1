"""Explanations of the fit score and the offer in the lead's own words: the
real Twilio webhook makes the lead, qualification scores it by the rules, and
the real SDKs ask a local model server for the words."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from agents import tasks
from agents.ai.explain import NAME, TIMER_KIND
from agents.fit.qualify import lead_fit
from crm.models import Business, Lead, ModelCall, Receipt, Timer
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.agents.ai.conftest import BUSINESS_FILE
from tests.helpers.capture import run_queued_events
from tests.helpers.llm import GOOD_DRAFT, ModelServer

pytestmark = pytest.mark.django_db

SECRET = "site-secret-123"

ASKED = "My furnace is making a loud banging noise at night, can you help?"
EXPLAINED = {
    "fit": 'A furnace job in our area: the lead says "loud banging noise" and left a valid phone.',
    "offer": "A second opinion suits someone unsure about their furnace.",
    "quotes": ["loud banging noise", "my furnace"],
}


def explaining(answer: dict[str, Any]) -> Any:
    """A model that explains with `answer` and drafts replies as usual."""

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        asked = (body.get("response_format") or {}).get("json_schema", {}).get("name") or (
            (body.get("tools") or [{}])[0].get("name")
        )
        return answer if asked == NAME else GOOD_DRAFT

    return reply


@pytest.fixture
def acme(db: None) -> Business:
    text = BUSINESS_FILE.replace("sources:\n", f"sources:\n  - {{key: site, provider: website, secret: {SECRET}}}\n")
    return business_spec_apply(business_file_parse(text, path="acme-ai.yaml")).business


def deliver(capture: Any, message: str) -> Lead:
    """A website form through its webhook and its processing (qualification
    scores the lead), then the AI queue's tasks as the cluster runs them."""
    form = {"first_name": "Rosa", "phone": "(212) 555-0147", "postal_code": "60601", "message": message}
    with capture(execute=True):
        response = Client().post(
            "/hooks/forms/site/",
            data=json.dumps(form),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {SECRET}",
        )
        assert response.status_code == 200
    with capture(execute=True):
        assert run_queued_events() == ["processed"]
    for queued in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(queued.payload)
        if task["func"] == "agents.tasks.ai_inbound":
            with capture(execute=True):
                tasks.ai_inbound(*task["args"])
            queued.delete()
    return Lead.objects.get()


def test_with_a_model_the_fit_score_gets_an_explanation_in_the_leads_words_and_the_same_points(
    acme: Business, model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    model.default = explaining(EXPLAINED)
    lead = deliver(django_capture_on_commit_callbacks, ASKED)

    rules = lead_fit(lead)
    assert (lead.fit_score, lead.fit_reasons) == (rules.score, rules.reasons)
    assert {"in_area", "service_matched", "has_phone"} <= {r["rule"] for r in lead.fit_reasons}
    words = lead.facts["fit_explanation"]
    assert words["fit"] == EXPLAINED["fit"] and words["offer"] == EXPLAINED["offer"]
    assert words["quotes"] == ["loud banging noise", "my furnace"] and words["score"] == lead.fit_score
    call = ModelCall.objects.get(purpose="explain")
    assert call.status == "ok" and words["call"] == call.public_id
    assert Receipt.objects.filter(action="lead.fit_explained", subject=lead.public_id).count() == 1
    # What was sent: the rules' points and the lead's words, never their number.
    [request] = [p for p in model.posts() if NAME in str(p["json"])]
    sent = str(request["json"])
    assert "loud banging noise" in sent and "service_matched" in sent
    assert "2125550147" not in sent and "Rosa" not in sent


def test_without_a_model_there_is_no_explanation_and_nothing_leaves_the_machine(
    acme: Business, django_capture_on_commit_callbacks: Any
) -> None:
    lead = deliver(django_capture_on_commit_callbacks, ASKED)
    assert lead.fit_score == lead_fit(lead).score
    assert "fit_explanation" not in lead.facts
    assert not Timer.objects.filter(kind=TIMER_KIND).exists() and not ModelCall.objects.exists()


@pytest.mark.parametrize(
    "answer",
    [
        {**EXPLAINED, "quotes": ["loud banging noise", "we need a whole new system"]},
        {**EXPLAINED, "fit": 'The lead "wants it replaced this week", a strong fit.'},
        {**EXPLAINED, "quotes": []},
    ],
)
def test_an_explanation_quoting_words_the_lead_never_wrote_is_dropped(
    acme: Business,
    openai_model: ModelServer,
    django_capture_on_commit_callbacks: Any,
    answer: dict[str, Any],
) -> None:
    openai_model.default = explaining(answer)
    lead = deliver(django_capture_on_commit_callbacks, ASKED)

    assert "fit_explanation" not in lead.facts
    assert lead.fit_score == lead_fit(lead).score
    dropped = Receipt.objects.get(action="ai.explanation_dropped")
    assert "was dropped" in dropped.reason
    assert not Receipt.objects.filter(action="lead.fit_explained").exists()


def test_a_failed_explanation_call_leaves_the_score_as_the_rules_made_it(
    acme: Business, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    openai_model.default = 500
    lead = deliver(django_capture_on_commit_callbacks, ASKED)
    assert "fit_explanation" not in lead.facts and lead.fit_score == lead_fit(lead).score
    assert ModelCall.objects.filter(purpose="explain", status="failed").count() == 1
