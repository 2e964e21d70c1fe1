"""The role matrix: every URL the project serves, for every demo role, an
outsider and an anonymous client, read and write, against an expected status.

The URL list is read from the resolver, so a new URL without an entry in
`MATRIX` fails `test_every_url_the_project_serves_has_an_entry`. Each request
runs in a savepoint that is rolled back, so a write by one role never changes
what the next one meets. Set `MATRIX_PRINT=1` to print the statuses observed
(in the table's own format) when adding a URL; then read every line before
pasting it: the table is the specification, not a recording.

Roles, in column order: owner (olivia), manager (mia), setter (sam, who owns
the sample lead), technician (tom, assigned to its visit and job), outsider
(otto, a manager of another business), anonymous.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.followup.sequences import enrollment_start
from approvals.models import ApprovalRequest
from approvals.services import approval_request_open
from crm import models as m
from crm.services.consent import consent_record
from crm.services.demo import demo_load
from crm.services.records import task_create
from crm.services.timers import timer_schedule
from tests.factories import BusinessFactory, member_create

ROLES = ("owner", "manager", "setter", "technician", "outsider", "anonymous")
USERNAMES = {"owner": "olivia", "manager": "mia", "setter": "sam", "technician": "tom", "outsider": "otto"}

# route -> (sample, GET statuses, POST statuses), one status per role in ROLES order; "-" skips a method.
# A sample names the record whose id fills the route's parameter (see `Samples.fill`).
MATRIX: dict[str, tuple[str, str, str]] = {}

# The generic admin pages of a model: (sample, {page: (GET, POST)}).
ADMIN_PAGES = ("changelist", "add", "history", "delete", "change")


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def served_routes() -> list[str]:
    return list(dict.fromkeys(_walk(get_resolver().url_patterns)))


# ------------------------------------------------------------------ the world


@dataclass
class Samples:
    records: dict[str, Any]

    def fill(self, route: str, sample: str) -> str:
        """A concrete path for a route: each parameter from the sample record."""
        record = self.records.get(sample)
        path = re.sub(r"(^|/)\^", r"\1", route).removesuffix("$")
        path = re.sub(r"\\\.\(\?P<format>\[a-z0-9\]\+\)/\?", ".json", path)
        path = path.replace("<drf_format_suffix:format>", ".json")
        path = path.replace("(?P<app_label>auth|authtoken|django_q|crm|approvals)", "crm")
        path = path.replace("(?P<url>.*)", "no-such-page/")
        path = path.replace("<path:content_type_id>", str(self.records.get("content_type", "")))
        path = re.sub(r"<path:object_id>", str(getattr(record, "pk", "")), path)
        key = getattr(record, "key", None) if isinstance(record, m.Source) else None
        value = str(key or getattr(record, "public_id", None) or "")
        path = re.sub(r"\(\?P<id>\[\^/\.\]\+\)", value, path)
        path = re.sub(r"<(?:str|slug):\w+>", value, path)
        return "/" + path


def world() -> Samples:
    demo_load()
    business = m.Business.objects.get(slug="acme-hvac")
    team = {t.user.username: t for t in m.TeamMember.objects.filter(business=business).select_related("user")}
    for member in team.values():
        Token.objects.get_or_create(user=member.user)
    other = BusinessFactory.create(slug="other-plumbing", name="Other Plumbing")
    otto = member_create(other, m.Role.MANAGER, username="otto")
    get_user_model().objects.filter(pk=otto.user_id).update(is_staff=True)

    # The sample lead: Sam's, with Tom's visit and job, so each role meets it as its own or not.
    lead = m.Lead.objects.filter(business=business, jobs__technician=team["tom"]).order_by("pk").first()
    assert lead is not None, "the demo has a lead with a job for tom"
    m.Lead.objects.filter(pk=lead.pk).update(owner=team["sam"])
    appointment = (
        m.Appointment.objects.filter(lead=lead).first() or m.Appointment.objects.filter(business=business).first()
    )
    m.Appointment.objects.filter(pk=appointment.pk).update(assigned_to=team["tom"], lead=lead)

    def of_lead(model: type[Any], **extra: Any) -> Any:
        return model.objects.filter(lead=lead, **extra).first() or model.objects.filter(business=business).first()

    contact = lead.contact
    point = m.ContactPoint.objects.filter(contact=contact).first()
    now = timezone.now()
    # What the demo does not hold yet, made the way the product makes it.
    sam_task = task_create(
        lead=lead, title="Call Pat back", due_at=now + timedelta(hours=1), actor="test", owner=team["sam"]
    )
    timer_schedule(business=business, kind="sla_check", due_at=now + timedelta(hours=1), lead=lead)
    approval_request_open(
        business=business, kind="message_draft", summary="A draft", proposed_by="agent:ai_sms_assistant", lead=lead,
        payload={"message": m.Message.objects.filter(lead=lead).first().public_id},
    )  # fmt: skip
    m.InboundEvent.objects.create(
        business=business, provider="website", external_id="matrix-1", body=b"{}", received_at=now, status="failed"
    )
    m.Call.objects.create(business=business, lead=lead, contact=contact, direction="in", status="completed",
                          started_at=now)  # fmt: skip
    m.RejectedDelivery.objects.create(business=business, provider="website", day=now.date(), count=1, last_at=now)
    consent_record(contact_point=point, channel="sms", granted=True, basis="form", actor="test")
    enrollment_start(lead, "no_reply", actor="test", now=now)
    records: dict[str, Any] = {
        "none": None,
        "lead": lead,
        "contact": contact,
        "contactpoint": point,
        "consentevent": m.ConsentEvent.objects.filter(contact_point__contact=contact).first()
        or m.ConsentEvent.objects.filter(business=business).first(),
        "leadtouch": of_lead(m.LeadTouch),
        "message": of_lead(m.Message),
        "call": of_lead(m.Call),
        "task": sam_task,
        "timer": of_lead(m.Timer),
        "enrollment": m.Enrollment.objects.filter(business=business).first(),
        "appointment": appointment,
        "estimate": of_lead(m.Estimate),
        "job": of_lead(m.Job),
        "invoice": of_lead(m.Invoice),
        "payment": of_lead(m.Payment),
        "refund": m.Refund.objects.filter(business=business).first(),
        "receipt": of_lead(m.Receipt),
        "approvalrequest": of_lead(ApprovalRequest),
        "inboundevent": m.InboundEvent.objects.filter(business=business).first(),
        "rejecteddelivery": m.RejectedDelivery.objects.filter(business=business).first(),
        "business": business,
        "source": m.Source.objects.filter(business=business).first(),
        "teammember": team["sam"],
        "serviceline": m.ServiceLine.objects.filter(business=business).first(),
        "servicearea": m.ServiceArea.objects.filter(business=business).first(),
        "messagetemplate": m.MessageTemplate.objects.filter(business=business).first(),
        "sequence": m.Sequence.objects.filter(business=business).first(),
        "user": team["sam"].user,
        "content_type": ContentType.objects.get_for_model(m.Lead).pk,
        "source:website": m.Source.objects.filter(business=business, provider="website").first(),
        "source:hosted_form": m.Source.objects.filter(business=business, provider="hosted_form").first(),
        "source:google_ads": m.Source.objects.filter(business=business, provider="google_ads").first(),
        "source:typeform": m.Source.objects.filter(business=business, provider="typeform").first(),
        "source:calendly": m.Source.objects.filter(business=business, provider="calendly").first(),
    }
    return Samples(records)


def client_for(role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(get_user_model().objects.get(username=USERNAMES[role]))
    return client


def observe(samples: Samples, route: str, sample: str, method: str) -> list[int]:
    path = samples.fill(route, sample)
    statuses = []
    for role in ROLES:
        client = client_for(role)
        with transaction.atomic():
            response = client.get(path) if method == "get" else client.post(path, {})
            transaction.set_rollback(True)
        statuses.append(response.status_code)
    return statuses


# ------------------------------------------------------------------ the tests

API_RESOURCES = {
    "leads": "lead",
    "contacts": "contact",
    "messages": "message",
    "inbound-events": "inboundevent",
    "tasks": "task",
    "enrollments": "enrollment",
    "appointments": "appointment",
    "estimates": "estimate",
    "jobs": "job",
    "invoices": "invoice",
    "payments": "payment",
    "refunds": "refund",
    "approvals": "approvalrequest",
}
OTHER_SAMPLES = {
    "admin/leads/<str:public_id>/": "lead",
    "admin/my/tasks/": "task",
    "hooks/forms/": "source:website",
    "f/": "source:hosted_form",
    "hooks/google-ads/": "source:google_ads",
    "hooks/typeform/": "source:typeform",
    "hooks/calendly/": "source:calendly",
    "hooks/twilio/follow-up/": "message",
    "api/v1/leads/<str:id>/": "lead",
    "api/v1/appointments/<str:id>/": "appointment",
    "admin/r/": "lead",
}


def guessed_sample(route: str) -> str:
    """Only for printing a first draft of a new entry."""
    for prefix, sample in OTHER_SAMPLES.items():
        if route.startswith(prefix):
            return sample
    admin_model = re.match(r"admin/\w+/(\w+)/", route)
    if admin_model:
        name = admin_model.group(1)
        return {"tokenproxy": "user", "group": "none"}.get(name, name)
    api = re.match(r"api/v1/\^?([\w-]+)", route)
    if api and api.group(1) in API_RESOURCES:
        return API_RESOURCES[api.group(1)]
    return "none"


def test_every_url_the_project_serves_has_an_entry() -> None:
    missing = [route for route in served_routes() if route not in MATRIX]
    stale = [route for route in MATRIX if route not in set(served_routes())]
    assert not missing, "URLs without an entry in the role matrix:\n" + "\n".join(missing)
    assert not stale, "entries for URLs no longer served:\n" + "\n".join(stale)


@pytest.mark.django_db
def test_every_url_answers_each_role_as_the_matrix_says() -> None:
    samples = world()
    printing = os.environ.get("MATRIX_PRINT") == "1"
    wrong = []
    for route in served_routes():
        sample, get_expected, post_expected = MATRIX.get(route, (guessed_sample(route), "", ""))
        observed = {}
        for method, expected in (("get", get_expected), ("post", post_expected)):
            if expected == "-" or (printing and method == "post" and "format" in route):
                observed[method] = "-"
                continue
            got = " ".join(str(s) for s in observe(samples, route, sample, method))
            observed[method] = got
            if not printing and got != expected:
                wrong.append(
                    f"{method.upper()} {samples.fill(route, sample)} ({route}): expected {expected}, got {got}"
                )
        if printing:
            print(f'    "{route}": ("{sample}", "{observed["get"]}", "{observed["post"]}"),')
    assert not printing, "printed the observed matrix"
    assert not wrong, "\n".join(wrong)
