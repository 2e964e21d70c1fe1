"""`GET /metrics`: the numbers an operator alerts on, in Prometheus' text format.

Every number is read from the database when Prometheus scrapes, never kept in
a process: the web server runs several gunicorn workers and the task clusters
run in processes of their own, so a counter in one process's memory would be
a fraction of the truth. The reads are a constant handful of aggregate
queries (one per table, GROUP BY where a label needs it), whatever the size of
the business; the big tables (leads, messages) are read over a recent window
or through their partial indexes, never whole.

Off unless METRICS_TOKEN is set (404, as if there were no such page); with it,
only a request carrying `Authorization: Bearer <METRICS_TOKEN>` is answered.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Min, Q, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from crm.models import CLOSED_STAGES, ConversionUpload, InboundEvent, Lead, Message, WebhookDelivery

# Speed to lead: the funnel's definition (Lead.speed_to_lead_seconds, first
# human contact minus arrival; test leads excluded), over the leads that
# arrived in this window, so the histogram follows the team's recent work.
SPEED_TO_LEAD_WINDOW = timedelta(days=7)
SPEED_TO_LEAD_BUCKETS = (60, 300, 900, 3600, 14400, 86400)
# Messages by status over this window: a count over every message ever sent
# would read the whole table at each scrape and never go down.
MESSAGES_WINDOW = timedelta(hours=24)
# Outbound messages not settled yet (the message sweep's business), at any age.
UNSETTLED_MESSAGE_STATUSES = (Message.Status.QUEUED, Message.Status.SENDING, Message.Status.UNKNOWN)
WAITING_INBOUND = (InboundEvent.Status.RECEIVED, InboundEvent.Status.PROCESSING)
CONVERSION_BACKLOG = (ConversionUpload.Status.PENDING, ConversionUpload.Status.SENDING)
WEBHOOK_BACKLOG = (WebhookDelivery.Status.PENDING, WebhookDelivery.Status.HELD, WebhookDelivery.Status.SENDING)


def _age(now: datetime, since: datetime | None) -> float:
    return max(0.0, (now - since).total_seconds()) if since else 0.0


def _leads(now: datetime) -> Iterator[Metric]:
    """Speed to lead and the SLA, in one aggregate over the leads table."""
    recent = Q(created_at__gte=now - SPEED_TO_LEAD_WINDOW, speed_to_lead_seconds__isnull=False)
    # Open and nobody has reached it yet (test leads are left out of everything).
    waiting = Q(first_response_at__isnull=True) & ~Q(stage__in=CLOSED_STAGES)
    aggregates = {
        f"le_{b}": Count("pk", filter=recent & Q(speed_to_lead_seconds__lte=b)) for b in SPEED_TO_LEAD_BUCKETS
    }
    row = (
        Lead.objects.filter(is_test=False)
        # Only the rows some figure counts: the window, and the open leads with a deadline.
        .filter(recent | (waiting & (Q(sla_due_at__isnull=False) | Q(sla_breached_at__isnull=False))))
        .aggregate(
            **aggregates,
            count=Count("pk", filter=recent),
            total=Sum("speed_to_lead_seconds", filter=recent),
            # The exceptions report's `sla_breached`: the SLA check marked it.
            breached=Count("pk", filter=waiting & Q(sla_breached_at__isnull=False)),
            # Past the deadline whether or not the check has run yet (a stalled
            # timer loop shows here before it shows in `breached`).
            overdue=Count("pk", filter=waiting & Q(sla_due_at__lt=now)),
        )
    )
    yield HistogramMetricFamily(
        "leadops_speed_to_lead_seconds",
        "Seconds from a lead's arrival to the first contact by a person (an automated acknowledgement is not one), "
        "over the leads that arrived in the last 7 days and have been contacted; test leads excluded.",
        # Bounds written as the library's own histograms write them (le="60.0").
        buckets=[(floatToGoString(b), row[f"le_{b}"]) for b in SPEED_TO_LEAD_BUCKETS] + [("+Inf", row["count"])],
        sum_value=row["total"] or 0,
    )
    yield GaugeMetricFamily(
        "leadops_sla_breached_leads",
        "Open leads whose first-response deadline was missed (marked by the SLA check) and that no person "
        "has contacted yet: the exceptions report's sla_breached.",
        value=row["breached"],
    )
    yield GaugeMetricFamily(
        "leadops_first_response_overdue_leads",
        "Open leads past their first-response deadline (sla_due_at) that no person has contacted yet, "
        "whether or not the SLA check has marked them.",
        value=row["overdue"],
    )


def _inbound(now: datetime) -> Iterator[Metric]:
    """Provider deliveries stored and not yet processed, and those that failed."""
    rows = {
        r["status"]: r
        for r in InboundEvent.objects.filter(status__in=[*WAITING_INBOUND, InboundEvent.Status.FAILED])
        .values("status")
        .annotate(n=Count("pk"), oldest=Min("received_at"))
        .order_by()
    }
    waiting = [rows[s] for s in WAITING_INBOUND if s in rows]
    yield GaugeMetricFamily(
        "leadops_inbound_events_waiting",
        "Inbound provider events stored and not processed yet (received or processing).",
        value=sum(r["n"] for r in waiting),
    )
    yield GaugeMetricFamily(
        "leadops_inbound_events_oldest_waiting_age_seconds",
        "Age of the oldest inbound event not processed yet (0 when none waits).",
        value=_age(now, min((r["oldest"] for r in waiting), default=None)),
    )
    failed = rows.get(InboundEvent.Status.FAILED)
    yield GaugeMetricFamily(
        "leadops_inbound_events_failed",
        "Inbound provider events whose processing failed (retrying, or left for a person to replay).",
        value=failed["n"] if failed else 0,
    )


def _messages(now: datetime) -> Iterator[Metric]:
    since = now - MESSAGES_WINDOW
    recent = GaugeMetricFamily(
        "leadops_messages",
        "Messages created in the last 24 hours, by direction and status.",
        labels=["direction", "status"],
    )
    unsettled = GaugeMetricFamily(
        "leadops_messages_unsettled",
        "Outbound messages still queued, sending or unknown, at any age (the message sweep settles them).",
        labels=["status"],
    )
    rows = (
        Message.objects.filter(Q(created_at__gte=since) | Q(direction="out", status__in=UNSETTLED_MESSAGE_STATUSES))
        .values("direction", "status")
        .annotate(recent=Count("pk", filter=Q(created_at__gte=since)), n=Count("pk"))
        .order_by("direction", "status")
    )
    found = {}
    for r in rows:
        if r["recent"]:
            recent.add_metric([r["direction"], r["status"]], r["recent"])
        if r["direction"] == "out" and r["status"] in UNSETTLED_MESSAGE_STATUSES:
            found[r["status"]] = r["n"]
    for status in UNSETTLED_MESSAGE_STATUSES:
        unsettled.add_metric([status], found.get(status, 0))
    yield recent
    yield unsettled


def _task_queues(now: datetime) -> Iterator[Metric]:
    """django-q2's queues, one per cluster: tasks waiting for a worker and how
    long the oldest has waited. With the ORM broker a row's `lock` is when it
    was enqueued until a worker takes it (then when the worker's claim ends,
    a time in the future): `lock <= now` is waiting."""
    depth = GaugeMetricFamily(
        "leadops_task_queue_depth", "django-q tasks waiting for a worker, per cluster queue.", labels=["queue"]
    )
    claimed = GaugeMetricFamily(
        "leadops_task_queue_claimed",
        "django-q tasks a worker has taken and not finished (ORM broker), per cluster queue.",
        labels=["queue"],
    )
    age = GaugeMetricFamily(
        "leadops_task_queue_oldest_age_seconds",
        "Seconds the oldest waiting django-q task has waited since it was enqueued or last handed back "
        "(ORM broker; 0 when none waits), per cluster queue.",
        labels=["queue"],
    )
    queues = [settings.Q_CLUSTER["name"], settings.WEBHOOKS_CLUSTER]
    if settings.Q_BROKER == "orm":
        from django_q.models import OrmQ

        waiting = Q(lock__lte=now)
        rows = {
            r["key"]: r
            for r in OrmQ.objects.values("key")
            .annotate(
                waiting=Count("pk", filter=waiting),
                claimed=Count("pk", filter=~waiting),
                oldest=Min("lock", filter=waiting),
            )
            .order_by()
        }
        for queue in [*queues, *sorted(set(rows) - set(queues))]:
            row = rows.get(queue, {"waiting": 0, "claimed": 0, "oldest": None})
            depth.add_metric([queue], row["waiting"])
            claimed.add_metric([queue], row["claimed"])
            age.add_metric([queue], _age(now, row["oldest"]))
        yield from (depth, claimed, age)
        return
    # Redis keeps no enqueue time and no claims: the depth alone, from Redis.
    from django_q.brokers import get_broker

    for queue in queues:
        depth.add_metric([queue], int(get_broker(queue).queue_size() or 0))
    yield depth


def _backlog(
    model: type[ConversionUpload] | type[WebhookDelivery],
    statuses: Iterable[str],
    name: str,
    what: str,
    now: datetime,
) -> Iterator[Metric]:
    statuses = list(statuses)
    rows = {
        r["status"]: r
        for r in model.objects.filter(status__in=statuses)
        .values("status")
        .annotate(n=Count("pk"), due=Count("pk", filter=Q(next_attempt_at__lte=now)), oldest=Min("created_at"))
        .order_by()
    }
    backlog = GaugeMetricFamily(name, f"{what} not finished yet, by status.", labels=["status"])
    for status in statuses:
        backlog.add_metric([status], rows[status]["n"] if status in rows else 0)
    yield backlog
    pending = rows.get("pending")
    yield GaugeMetricFamily(
        f"{name}_due",
        f"{what} pending whose next attempt is due now or overdue.",
        value=pending["due"] if pending else 0,
    )
    yield GaugeMetricFamily(
        f"{name}_oldest_age_seconds",
        f"Age of the oldest of the {what.lower()} not finished yet (0 when there is none).",
        value=_age(now, min((r["oldest"] for r in rows.values()), default=None)),
    )


class LeadOpsCollector(Collector):
    """Reads every metric from the database at scrape time."""

    def describe(self) -> Iterable[Metric]:
        # Registering must not query the database.
        return []

    def collect(self) -> Iterable[Metric]:
        now = timezone.now()
        yield from _leads(now)
        yield from _inbound(now)
        yield from _messages(now)
        yield from _task_queues(now)
        yield from _backlog(
            ConversionUpload, CONVERSION_BACKLOG, "leadops_conversion_uploads_backlog", "Conversion uploads", now
        )
        yield from _backlog(
            WebhookDelivery, WEBHOOK_BACKLOG, "leadops_webhook_deliveries_backlog", "Outbound webhook deliveries", now
        )


# Our metrics alone: the default registry would add this process's own
# (memory, CPU), which say nothing about a server of many processes.
registry = CollectorRegistry(auto_describe=False)
registry.register(LeadOpsCollector())


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # compare_digest: the time taken says nothing about how much of the token matched.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@csrf_exempt
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404
    if not _authorized(request, token):
        # Nothing about what was wrong: missing, malformed and wrong look alike.
        return HttpResponse(status=401, headers={"WWW-Authenticate": "Bearer"})
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET"})
    # The classic text format (0.0.4): every Prometheus version reads it.
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_PLAIN_0_0_4)
    response["Cache-Control"] = "no-store"
    return response
