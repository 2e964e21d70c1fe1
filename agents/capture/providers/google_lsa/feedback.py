"""Telling Google how each Local Services lead turned out
(LocalServicesLeadService.ProvideLeadFeedback), once per lead.

A lead that reached booked or later (an appointment, an estimate, won and
paid) was a good lead: SATISFIED, BOOKED_CUSTOMER. A lead closed as not a job
(disqualified) was not: DISSATISFIED, with the reason Google names — outside
the service area GEO_MISMATCH, a job the business does not take
JOB_TYPE_MISMATCH, else OTHER with the reason in words — and Google may
credit it. A lead lost to a competitor or gone quiet was a real lead: nothing
is said.

The hook is a sweep over rows, not a signal: each run of the poll job gives
every Local Services touch whose lead reached one of those stages, and that
has none yet, a feedback timer keyed by the Google lead (Timer.dedupe_key:
one per Google lead, whatever runs at once), with the answer decided then.
The timer calls Google (`own_job`: the poll job runs it, never the timer
loop); done when Google took the feedback, its answer (the credit decision)
kept on the timer and a receipt on the lead. A try that fails is retried after
a growing wait, up to MAX_TRIES, then stays failed for a person (the timer's
retry). Before each try Google is asked whether the lead already has
feedback (`lead_feedback_submitted`): a try whose answer was lost, or
feedback someone gave in Google's own app, is never sent again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Value
from django.db.models.functions import Concat
from django.utils import timezone

from agents.capture.providers.google_lsa import api
from agents.capture.providers.google_lsa.poll import LEAD
from agents.capture.providers.google_lsa.rows import LEAD_NAME
from crm.models import Lead, LeadException, LeadTouch, Provider, Source, Stage, Timer
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register, timer_schedule
from crm.work_queue import Backoff

if TYPE_CHECKING:
    from google.ads.googleads.v26.services.types.local_services_lead_service import ProvideLeadFeedbackRequest

ACTOR = "agent:google_lsa"
TIMER_KIND = "lsa.feedback"
SATISFIED_STAGES = (Stage.BOOKED, Stage.APPOINTMENT_HELD, Stage.ESTIMATE_SENT, Stage.WON)
NOT_A_JOB_STAGES = (Stage.DISQUALIFIED,)
JOB_TYPE_FLAGS = {LeadException.COMMERCIAL, LeadException.WARRANTY, LeadException.LICENSED_DIAGNOSIS}
MAX_TRIES = 5
RETRY = Backoff(first=timedelta(minutes=5), cap=timedelta(hours=6))
SCHEDULE_BATCH = 200
COMMENT_LIMIT = 500


def feedback_for(lead: Lead) -> dict[str, str]:
    """What Google is told about a lead in its current stage."""
    if lead.stage in SATISFIED_STAGES:
        return {"answer": "SATISFIED", "reason": "BOOKED_CUSTOMER"}
    flags = set(lead.exceptions)
    if LeadException.OUT_OF_AREA in flags:
        return {"answer": "DISSATISFIED", "reason": "GEO_MISMATCH"}
    if flags & JOB_TYPE_FLAGS:
        return {"answer": "DISSATISFIED", "reason": "JOB_TYPE_MISMATCH"}
    # Google asks for words with OTHER.
    comment = lead.lost_reason.strip() or "Closed as not a job for this business."
    return {"answer": "DISSATISFIED", "reason": "OTHER_DISSATISFIED_REASON", "comment": comment[:COMMENT_LIMIT]}


def feedback_schedule(*, now: datetime | None = None, batch: int = SCHEDULE_BATCH) -> int:
    """Give each Local Services lead whose lead was booked (or later) or
    disqualified its feedback timer, once; returns how many were made."""
    now = now or timezone.now()
    touches = (
        LeadTouch.objects.filter(
            provider=Provider.GOOGLE_LSA,
            inbound_event__provider=Provider.GOOGLE_LSA,
            inbound_event__kind=LEAD,
            lead__is_test=False,
            lead__stage__in=[*SATISFIED_STAGES, *NOT_A_JOB_STAGES],
        )
        .annotate(feedback_key=Concat(Value(f"{TIMER_KIND}:"), F("inbound_event__external_id")))
        .exclude(Exists(Timer.objects.filter(dedupe_key=OuterRef("feedback_key"))))
        .select_related("lead__business", "inbound_event")
        .order_by("pk")[:batch]
    )
    made = 0
    for touch in touches:
        assert touch.inbound_event is not None
        timer_schedule(
            business=touch.lead.business,
            kind=TIMER_KIND,
            due_at=now,
            lead=touch.lead,
            payload={
                "lsa_lead": touch.inbound_event.external_id,
                "source": touch.inbound_event.source_id,
                "stage": touch.lead.stage,
                **feedback_for(touch.lead),
            },
            dedupe_key=f"{TIMER_KIND}:{touch.inbound_event.external_id}",
        )
        made += 1
    return made


def feedback_retry(*, now: datetime | None = None) -> int:
    """Put failed feedback timers with tries left back, due after a growing
    wait from their last try; returns how many."""
    now = now or timezone.now()
    failed = Timer.objects.filter(kind=TIMER_KIND, status=Timer.Status.FAILED, attempts__lt=MAX_TRIES)
    moved = 0
    for pk, attempts, claimed_at in failed.values_list("pk", "attempts", "claimed_at")[:SCHEDULE_BATCH]:
        due = (claimed_at or now) + RETRY.delay(attempts)
        # Conditional: a person's retry (or another sweep) may have moved it.
        moved += Timer.objects.filter(pk=pk, status=Timer.Status.FAILED, attempts=attempts).update(
            status=Timer.Status.PENDING, due_at=due
        )
    return moved


def _request(payload: dict[str, Any]) -> ProvideLeadFeedbackRequest:
    # Imported here: the Google Ads types take seconds to load, and every
    # process registers this provider at startup.
    from google.ads.googleads.v26.services.types.local_services_lead_service import (
        ProvideLeadFeedbackRequest,
        SurveyDissatisfied,
        SurveySatisfied,
    )

    request = ProvideLeadFeedbackRequest(resource_name=payload["lsa_lead"], survey_answer=payload["answer"])
    if payload["answer"] == "SATISFIED":
        request.survey_satisfied = SurveySatisfied(survey_satisfied_reason=payload["reason"])
    else:
        request.survey_dissatisfied = SurveyDissatisfied(
            survey_dissatisfied_reason=payload["reason"], other_reason_comment=payload.get("comment", "")
        )
    return request


def _given(source: Source, lsa_lead: str) -> bool:
    """Whether Google already holds feedback for the lead."""
    if not LEAD_NAME.match(lsa_lead):
        raise ValueError(f"{lsa_lead!r} is not a Local Services lead's resource name")
    fields = "local_services_lead.resource_name, local_services_lead.lead_feedback_submitted"
    where = f"local_services_lead.resource_name = '{lsa_lead}'"  # GAQL, not SQL: a name checked above
    found = api.search(source, f"SELECT {fields} FROM local_services_lead WHERE {where}")  # noqa: S608
    return any(row.get("local_services_lead", {}).get("lead_feedback_submitted") for row in found)


def feedback_send(timer: Timer) -> None:
    """The timer's handler: ask Google whether the lead has feedback, give it
    if not, and record the answer. Raises on any failure (the timer fails
    with the error, and `feedback_retry` puts it back)."""
    payload = dict(timer.payload)
    source = Source.objects.select_related("business").get(pk=payload["source"])
    if _given(source, payload["lsa_lead"]):
        outcome = {"outcome": "already_given"}
    else:
        services = api.services_for(source)
        request = _request(payload)
        response = api.google_call(
            services,
            lambda: services.get("LocalServicesLeadService").provide_lead_feedback(
                request=request, timeout=api.timeout()
            ),
        )
        outcome = {"outcome": "sent", "credit_issuance_decision": response.credit_issuance_decision.name}
    with transaction.atomic():
        Timer.objects.filter(pk=timer.pk).update(
            payload={**payload, **outcome, "at": timezone.now().isoformat()}, error=""
        )
        receipt_write(
            business=source.business,
            lead=timer.lead,
            subject=timer.public_id,
            actor=ACTOR,
            action="lead.lsa_feedback_sent" if outcome["outcome"] == "sent" else "lead.lsa_feedback_found",
            after={k: payload.get(k) for k in ("lsa_lead", "answer", "reason")} | outcome,
        )


def register() -> None:
    timer_handler_register(TIMER_KIND, feedback_send, own_job=True)
