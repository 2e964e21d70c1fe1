"""`manage.py simulate` and its logic (devtools/simulator/core.py): Twilio's signer
against the published vectors, the plan it builds, the Graph stand-in, and whole runs
over real HTTP against the live server, whose stored events are then processed
the way the cluster would."""

from __future__ import annotations

import hmac
import json
import random
import re
from collections import Counter
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from urllib.parse import parse_qsl, unquote_plus

import phonenumbers
import pytest
import requests
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import CommandError
from twilio.request_validator import RequestValidator

from agents.capture.providers.meta import signature_valid
from agents.capture.providers.typeform import typeform_signature
from agents.meta_graph import GraphError, lead_fetch
from agents.orchestrator import orchestrate_pending
from crm.models import CLOSED_STAGES, Business, Call, Contact, ContactPoint, InboundEvent, Lead, Message
from crm.phones import phone_to_e164
from crm.services.business_file import business_file_parse, business_spec_apply
from devtools.simulator.core import (
    AREA_CODES,
    BAD_SIGNATURE,
    BUILDER_NAMES,
    CALL_STATUS,
    DUPLICATE,
    HOSTED_RATE_LIMITED,
    LEAD,
    MALFORMED,
    REPLY,
    STORES_FAILED,
    STORES_NEW,
    STORES_NONE,
    STORES_SAME,
    GraphServer,
    Plan,
    Result,
    SimContext,
    SourceInfo,
    context_load,
    email_styles,
    people_make,
    phone_styles,
    plan_build,
    plan_run,
    summary_lines,
    unexpected,
)
from tests.helpers.simulator import DEMO, HOSTED_FORM_FILE, process_received

# The provider pack's samples and their published signatures, kept beside the agents' tests.
SAMPLES = Path(__file__).resolve().parents[1] / "agents" / "samples"
VECTORS = json.loads((SAMPLES / "signature_vectors.json").read_text())
META_SECRET = "sim-test-meta-app-secret"
TWILIO_TOKEN = "sim-test-twilio-auth-token"
NOW = datetime(2026, 3, 14, 15, 0, tzinfo=UTC)


def twilio_params(name: str) -> dict[str, str]:
    lines = (SAMPLES / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


# --- the Twilio signer against the published vectors ------------------------------
# The other providers' signers are their modules' own, tested beside them.


@pytest.mark.parametrize("name", sorted(VECTORS["twilio"]["files"]))
def test_twilios_signer_reproduces_the_published_vectors(name):
    vector = VECTORS["twilio"]["files"][name]
    validator = RequestValidator(VECTORS["twilio"]["auth_token"])
    assert validator.compute_signature(vector["url"], twilio_params(name)) == vector["X-Twilio-Signature"]


# --- the plan ------------------------------------------------------------------------


# The providers whose people are on file by phone or Instagram id.
ON_FILE = ("google_ads", "website", "hosted_form", "typeform", "meta", "instagram", "twilio")


def every_source() -> SimContext:
    sources = [
        SourceInfo("gads-main", "google_ads", "gads-secret"),
        SourceInfo("site", "website", "site-secret"),
        SourceInfo("acme-quote", "hosted_form", ""),
        SourceInfo("tf-quote", "typeform", "tf-secret"),
        SourceInfo("fb", "meta", "", {"page_id": "100000000000001", "access_token": "page-token"}),
        SourceInfo("ig", "instagram", "", {"account_id": "17841400000000001"}),
        SourceInfo("main-line", "twilio", "", {"phone_number": "+13125550100", "forward_to": "+13125550199"}),
        SourceInfo("thumbtack", "thumbtack", "tt-secret"),
        SourceInfo("yelp", "yelp", "", {"business_id": "AcmeYelp01", "access_token": "yelp-token"}),
        SourceInfo("angi", "angi", "angi-path-secret"),
        SourceInfo("callrail", "callrail", "callrail-key", {"company_id": "COM1"}),
    ]
    return SimContext(
        business_slug="acme-hvac",
        business_name="Acme Heating & Air",
        region="US",
        sources={s.provider: [s] for s in sources},
        meta_app_secret=META_SECRET,
        twilio_auth_token=TWILIO_TOKEN,
        public_base_url="https://backoffice.example.com",
        reserved_phones=frozenset({"+13125550100", "+13125550199"}),
    )


def test_the_same_seed_builds_the_same_bytes_and_another_seed_does_not():
    def fingerprint(plan: Plan) -> list[tuple[str, str, bytes, str]]:
        return [(p.builder, p.path, p.body, json.dumps(p.form, sort_keys=True)) for p in plan.posts]

    first = plan_build(every_source(), leads=25, seed=4, now=NOW)
    assert fingerprint(first) == fingerprint(plan_build(every_source(), leads=25, seed=4, now=NOW))
    assert fingerprint(first) != fingerprint(plan_build(every_source(), leads=25, seed=5, now=NOW))


def test_people_get_distinct_valid_fictional_numbers_across_area_codes():
    people = people_make(random.Random(1), 450, {"+13125550100"})
    numbers = [p.phone for p in people]
    assert len(set(numbers)) == 450 and "+13125550100" not in numbers
    codes = {code for code, *_ in AREA_CODES}
    for number in numbers:
        match = re.fullmatch(r"\+1(\d{3})5550(1\d\d)", number)
        assert match and match.group(1) in codes
        assert phonenumbers.is_valid_number(phonenumbers.parse(number))
    assert len({n[2:5] for n in numbers}) >= 5  # 100 numbers per area code


def test_every_typed_phone_and_email_style_normalizes_to_the_person():
    assert phone_styles("+12125550147")[:4] == ["(212) 555-0147", "212.555.0147", "+1 212 555 0147", "2125550147"]
    assert {phone_to_e164(style) for style in phone_styles("+12125550147")} == {"+12125550147"}
    styles = email_styles("rosa.diaz@example.com")
    assert len(set(styles)) == 4 and {s.lower() for s in styles} == {"rosa.diaz@example.com"}


def test_a_plan_holds_every_kind_of_delivery_for_every_provider():
    plan = plan_build(every_source(), leads=30, seed=9, now=NOW)
    assert plan.builders == list(BUILDER_NAMES) and not plan.skipped
    intents = Counter((p.builder, p.intent) for p in plan.posts)
    for name in BUILDER_NAMES:
        for intent in (LEAD, DUPLICATE, MALFORMED, BAD_SIGNATURE):
            assert intents[(name, intent)] >= 1, (name, intent)
    assert intents[("twilio", CALL_STATUS)] >= 1 and intents[("twilio", REPLY)] >= 1
    assert any(len(channels) >= 2 for channels in plan.channels.values())
    assert sum(1 for p in plan.posts if p.builder == "google_ads" and b'"is_test":true' in p.body) >= 1
    # A repeat carries the exact bytes of a delivery posted in an earlier phase.
    phase_of = {id(post): job.phase for job in plan.jobs for post in job.posts}
    for dup in (p for p in plan.posts if p.intent == DUPLICATE and not p.repeat_previous):
        originals = [p for p in plan.posts if p.intent != DUPLICATE and (p.body, p.headers) == (dup.body, dup.headers)]
        assert len(originals) == 1 and phase_of[id(originals[0])] < phase_of[id(dup)]


def test_a_person_on_several_channels_keeps_the_phone_and_changes_the_emails_case():
    plan = plan_build(every_source(), leads=10, seed=2, now=NOW, only=["website", "typeform"])
    first = plan.people[0]
    assert plan.channels[first.number] in (["website", "typeform"], ["typeform", "website"])
    sent = [p for p in plan.posts if p.person == first.number and p.intent == LEAD]
    bodies = " ".join(unquote_plus(p.body.decode()) for p in sent)
    emails = set(re.findall(r"[\w.+-]+@example\.(?:com|net|org)", bodies, re.IGNORECASE))
    assert len(emails) == 2 and {e.lower() for e in emails} == {first.email}


def test_signed_posts_verify_the_way_the_server_checks_them_and_forged_ones_do_not():
    ctx = every_source()
    plan = plan_build(ctx, leads=30, seed=3, now=NOW)
    twilio = RequestValidator(TWILIO_TOKEN)
    for post in plan.posts:
        forged = post.intent == BAD_SIGNATURE
        if post.builder in ("meta", "instagram"):
            assert signature_valid(post.body, post.headers["X-Hub-Signature-256"], META_SECRET) is not forged
        elif post.builder == "typeform":
            valid = hmac.compare_digest(post.headers["Typeform-Signature"], typeform_signature("tf-secret", post.body))
            assert valid is not forged
        elif post.builder == "twilio":
            params = dict(parse_qsl(post.body.decode(), keep_blank_values=True))
            url = ctx.public_base_url + post.path
            assert twilio.validate(url, params, post.headers["X-Twilio-Signature"]) is not forged
        elif post.builder == "website":
            assert (post.headers["Authorization"] == "Bearer site-secret") is not forged
        elif post.builder == "google_ads" and post.intent != MALFORMED:
            assert (json.loads(post.body)["google_key"] == "gads-secret") is not forged


def test_a_provider_without_its_secret_or_source_is_skipped_with_the_reason():
    ctx = every_source()
    ctx.meta_app_secret = ""
    del ctx.sources["typeform"]
    plan = plan_build(ctx, leads=5, seed=1, now=NOW)
    assert "META_APP_SECRET" in plan.skipped["meta"] and "META_APP_SECRET" in plan.skipped["instagram"]
    assert plan.skipped["typeform"] == "no active typeform source"
    posted = {"google_ads", "website", "hosted_form", "twilio", "thumbtack", "yelp", "angi", "callrail"}
    assert {p.builder for p in plan.posts} == posted


def business_with_a_line(slug: str, line: str, account: tuple[str, str] | None = None) -> None:
    own = f', account_sid: "{account[0]}", auth_token: "{account[1]}"' if account else ""
    text = f"""\
business: {{slug: {slug}, name: {slug.title()}, timezone: America/New_York, region: US}}
sources:
  - {{key: {slug}-line, provider: twilio, phone_number: "{line}"{own}}}
"""
    business_spec_apply(business_file_parse(text, path=f"{slug}.yaml"))


def test_a_businesss_twilio_hooks_are_signed_with_that_businesss_own_token(db, settings):
    settings.TWILIO_ACCOUNT_SID, settings.TWILIO_AUTH_TOKEN = "AC" + "0" * 32, "operator-shared-token"
    bravo_account = ("AC" + "b" * 32, "bravo-own-token-2222")
    business_with_a_line("acme", "+13125550100", ("AC" + "a" * 32, "acme-own-token-1111"))
    business_with_a_line("bravo", "+13125550200", bravo_account)
    business_with_a_line("corner", "+13125550300")
    bravo = context_load("bravo")
    assert (bravo.twilio_account_sid, bravo.twilio_auth_token) == bravo_account
    # A business without an account of its own is signed with the operator's.
    assert context_load("corner").twilio_auth_token == "operator-shared-token"


# --- the Graph stand-in, read by our own Graph client ---------------------------------


def test_the_graph_stand_in_serves_announced_leads_to_the_page_token_only():
    plan = plan_build(every_source(), leads=6, seed=8, now=NOW, only=["meta"])
    leadgen_id = next(iter(plan.graph_leads))
    with GraphServer() as graph:
        graph.publish(plan.graph_leads, plan.graph_tokens)
        lead = lead_fetch(leadgen_id, access_token="page-token", base_url=graph.url + "/v21.0")
        assert lead["id"] == leadgen_id and lead["field_data"][0]["name"] == "full_name"
        with pytest.raises(GraphError, match="code 190"):
            lead_fetch(leadgen_id, access_token="stolen", base_url=graph.url)
        with pytest.raises(GraphError, match="code 100"):
            lead_fetch("999", access_token="page-token", base_url=graph.url)
        narrowed = requests.get(f"{graph.url}/{leadgen_id}?fields=id,form_id&access_token=page-token", timeout=5)
        assert set(narrowed.json()) == {"id", "form_id"}
        assert graph.wait_fetched(plan.graph_leads, timeout=0) == {leadgen_id} and graph.refused == 2


# --- whole runs against the live server ---------------------------------------------


@pytest.fixture
def acme(transactional_db, live_server, settings, tmp_path) -> Business:
    call_command("load_business", str(DEMO), stdout=StringIO())
    extra = tmp_path / "hosted.yaml"
    extra.write_text(HOSTED_FORM_FILE)
    call_command("load_business", str(extra), stdout=StringIO())
    # The hosted form's rate limit lives in the cache, shared with the live server.
    cache.clear()
    settings.PUBLIC_BASE_URL = live_server.url
    settings.META_APP_SECRET = META_SECRET
    settings.TWILIO_AUTH_TOKEN = TWILIO_TOKEN
    settings.META_GRAPH_ATTEMPTS = 1
    return Business.objects.get(slug="acme-hvac")


def assert_stored_as_posted(results: list[Result]) -> None:
    stored = Counter((e.provider, bytes(e.body)) for e in InboundEvent.objects.all())
    every_body = Counter(bytes(e.body) for e in InboundEvent.objects.all())
    expected_rows = set()
    for r in results:
        key = (r.post.event_provider, r.sent)
        if r.post.stores in (STORES_NEW, STORES_SAME, STORES_FAILED):
            assert stored[key] == 1, (r.post.builder, r.post.intent, r.sent[:120])
            expected_rows.add(key)
        else:
            assert r.post.stores == STORES_NONE and every_body[r.sent] == 0, (r.post.builder, r.post.intent)
    assert sum(stored.values()) == len(expected_rows)


def test_a_simulated_day_is_stored_once_per_delivery_and_makes_one_contact_per_person(acme, live_server, settings):
    ctx = context_load("acme-hvac")
    # The channels a person has on file by phone or Instagram id (the
    # marketplaces' and call tracking's own tests post theirs:
    # test_simulated_marketplaces.py, test_simulated_calls.py).
    plan = plan_build(ctx, leads=8, seed=113, only=list(ON_FILE))
    # This seed brings everything: missed calls, a text from a new number, SMS
    # and DM replies, a Google test lead, a person on three channels.
    assert plan.builders == list(ON_FILE)
    kinds = Counter((p.path, p.intent) for p in plan.posts)
    assert kinds[("/hooks/twilio/voice/", LEAD)] == 2 and kinds[("/hooks/twilio/sms/", LEAD)] == 1
    assert kinds[("/hooks/twilio/sms/", REPLY)] >= 1 and kinds[("/hooks/meta/", REPLY)] >= 1
    assert any(p.is_google_test for p in plan.people) and max(map(len, plan.channels.values())) == 3
    with GraphServer() as graph:
        settings.META_GRAPH_URL = graph.url
        graph.publish(plan.graph_leads, plan.graph_tokens)
        results = plan_run(plan, live_server.url, concurrency=4)
        assert unexpected(results) == [], "\n".join(summary_lines(plan, results))
        assert HOSTED_RATE_LIMITED not in {r.status for r in results}
        assert_stored_as_posted(results)
        assert process_received()["failed"] == 0  # malformed ones were stored failed already
        assert graph.fetched == set(plan.graph_leads)

    failed_bodies = {r.sent for r in results if r.post.stores == STORES_FAILED}
    for event in InboundEvent.objects.all():
        want = "failed" if bytes(event.body) in failed_bodies else "processed"
        assert event.status == want, (event.provider, event.kind, event.error)

    # One contact per simulated person, however many channels they used.
    assert Contact.objects.filter(business=acme).count() == len(plan.people)
    contacts = set()
    for person in plan.people:
        kind, value = ("instagram", person.igsid) if person.igsid else ("phone", person.phone)
        contact = ContactPoint.objects.get(business=acme, kind=kind, value=value).contact
        contacts.add(contact.pk)
        emails = set(contact.points.filter(kind="email").values_list("value", flat=True))
        assert emails <= {person.email}
    assert len(contacts) == len(plan.people)

    # Each missed call: a no-answer Call, whichever of its callbacks came first.
    assert Call.objects.filter(business=acme, direction="in", status="no-answer").count() == 2
    texts = [r for r in results if r.post.path == "/hooks/twilio/sms/" and r.post.stores == STORES_NEW]
    assert Message.objects.filter(direction="in", channel="sms").count() == len(texts)

    # Every simulated lead has an owner or sits in the manager queue with the
    # reason, and every active lead has exactly one open next action.
    assert orchestrate_pending() > 0
    active = Lead.objects.filter(business=acme, is_test=False).exclude(stage__in=CLOSED_STAGES)
    assert active.exists()
    for lead in active:
        assert lead.owner_id is not None, lead.public_id
        if "no_eligible_owner" in lead.exceptions:
            assert lead.routing_reason, lead.public_id
        assert lead.tasks.filter(kind="next_action", status="open").count() == 1, lead.public_id
        assert lead.next_action and lead.next_action_due_at is not None


def test_the_command_posts_the_selected_providers_and_reports_what_was_meant_to_fail(acme, live_server):
    out = StringIO()
    call_command(
        "simulate", "--url", live_server.url, "--leads", "6", "--seed", "5", "--only", "website,hosted_form", stdout=out
    )
    report = out.getvalue()
    assert "Simulating 6 people for acme-hvac" in report
    assert re.search(r"website\s+\d+ posts\s+200×\d+ 400×1 401×1", report)
    assert re.search(r"hosted_form\s+\d+ posts\s+200×\d+ 400×1 403×1", report)
    assert "Unexpected statuses: none" in report and "Estimates: not simulated (no API token" in report
    assert InboundEvent.objects.filter(provider="website", status="failed").count() == 1
    stored = InboundEvent.objects.filter(provider__in=["website", "hosted_form"]).exclude(status="failed").count()
    assert stored == process_received()["processed"]
    assert Contact.objects.filter(business=acme).count() == 6


def test_twilio_signed_for_the_wrong_public_url_is_unexpected_and_exits_non_zero(acme, live_server):
    out = StringIO()
    with pytest.raises(CommandError, match="unexpected status"):
        call_command(
            "simulate",
            "--url",
            live_server.url,
            "--leads",
            "3",
            "--seed",
            "1",
            "--only",
            "twilio",
            "--public-base-url",
            "https://old-host.example",
            stdout=out,
        )
    assert "Unexpected statuses:" in out.getvalue() and "-> 403 (expected 200)" in out.getvalue()
    assert not InboundEvent.objects.filter(provider="twilio").exists()


def test_the_command_refuses_a_server_that_is_not_this_machine():
    with pytest.raises(CommandError, match="is not 127"):
        call_command("simulate", "--url", "http://203.0.113.7:8000", "--leads", "1", stdout=StringIO())
