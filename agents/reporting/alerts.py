"""Slack alerts for what cannot wait for tomorrow's brief: an SLA breach, a
complaint, and a burst of failed webhooks.

An alert is a Timer row (kind `reporting.slack_alert`) keyed by what it is
about (`alert:sla:<lead>`, `alert:complaint:<lead>`,
`alert:webhooks:<hour>`): the unique dedupe key makes each alert exist once
however many scans find it, and the timer runner's claim makes it post once;
a post Slack refuses leaves the timer `failed` with the error, visible in the
admin. Nothing is queued while `SLACK_WEBHOOK_URL` is unset.

`alerts_scan` runs with every `run_timers` (each minute), looking back a day,
so a breach or complaint is announced within a minute or two of being
recorded; `alert_raise` lets any role queue an alert of its own.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest
from crm.models import CLOSED_STAGES, Business, InboundEvent, Lead, Timer
from crm.services.timers import timer_handler_register, timer_schedule

TIMER_KIND = "reporting.slack_alert"
LOOKBACK = timedelta(days=1)
BURST_WINDOW = timedelta(minutes=15)
BURST_THRESHOLD = 5
TIMEOUT = (3.05, 5)


def _link(path: str) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + path


def alert_raise(*, business: Business, key: str, text: str, lead: Lead | None = None) -> Timer | None:
    """Queue one Slack alert for `key` (once ever per key)."""
    if not settings.SLACK_WEBHOOK_URL:
        return None
    return timer_schedule(
        business=business, kind=TIMER_KIND, due_at=timezone.now(), lead=lead,
        payload={"text": text}, dedupe_key=f"alert:{key}"[:200],
    )  # fmt: skip


def _queue(alerts: list[Timer]) -> int:
    existing = set(
        Timer.objects.filter(dedupe_key__in=[a.dedupe_key for a in alerts]).values_list("dedupe_key", flat=True)
    )
    fresh = [a for a in alerts if a.dedupe_key not in existing]
    Timer.objects.bulk_create(fresh, ignore_conflicts=True)
    return len(fresh)


def alerts_scan(*, now: datetime | None = None) -> int:
    """Queue the alerts due now; returns how many are new."""
    if not settings.SLACK_WEBHOOK_URL:
        return 0
    now = now or timezone.now()
    alerts: list[Timer] = []

    def add(business_id: int, key: str, text: str, lead_id: int | None = None) -> None:
        alerts.append(
            Timer(
                business_id=business_id,
                lead_id=lead_id,
                kind=TIMER_KIND,
                due_at=now,
                payload={"text": text},
                dedupe_key=f"alert:{key}"[:200],
            )
        )

    breached = (
        Lead.objects.filter(sla_breached_at__gte=now - LOOKBACK, first_response_at__isnull=True)
        .exclude(stage__in=CLOSED_STAGES)
        .select_related("business", "contact", "owner__user")
    )
    for lead in breached:
        owner = lead.owner.user.get_username() if lead.owner else "nobody"
        add(
            lead.business_id, f"sla:{lead.public_id}",
            f":rotating_light: {lead.business.name}: first response overdue for {lead.contact.name or lead.public_id} "
            f"({lead.public_id}, owner {owner}) since {lead.sla_breached_at:%H:%M} UTC — "
            f"{_link(reverse('admin:crm_lead_change', args=[lead.pk]))}",
            lead.pk,
        )  # fmt: skip

    complaint_leads = ApprovalRequest.objects.filter(
        kind=ApprovalRequest.Kind.COMPLAINT, created_at__gte=now - LOOKBACK, lead__isnull=False
    ).values("lead_id")
    complaints = (
        Lead.objects.filter(
            Q(exceptions__contains=["complaint"], updated_at__gte=now - LOOKBACK) | Q(pk__in=complaint_leads)
        )
        .select_related("business", "contact")
        .distinct()
    )
    for lead in complaints:
        add(
            lead.business_id, f"complaint:{lead.public_id}",
            f":warning: {lead.business.name}: complaint from {lead.contact.name or lead.public_id} ({lead.public_id}); "
            f"automation is paused until a person decides — {_link(reverse('admin:crm_lead_change', args=[lead.pk]))}",
            lead.pk,
        )  # fmt: skip

    failed = list(
        InboundEvent.objects.filter(status=InboundEvent.Status.FAILED, received_at__gte=now - BURST_WINDOW).values_list(
            "business_id", "provider"
        )
    )
    if len(failed) >= BURST_THRESHOLD:
        # One webhook URL serves the installation, so a burst is announced
        # once an hour for all of it, filed under the first business.
        home = Business.objects.order_by("pk").values_list("pk", flat=True).first()
        if home is not None:
            by_provider = Counter(provider for _, provider in failed)
            detail = ", ".join(f"{p}: {n}" for p, n in by_provider.most_common())
            add(
                home, f"webhooks:{now:%Y-%m-%dT%H}",
                f":fire: {len(failed)} webhook deliveries failed in the last {BURST_WINDOW.seconds // 60} minutes "
                f"({detail}) — {_link(reverse('admin:crm_inboundevent_changelist') + '?status__exact=failed')}",
            )  # fmt: skip
    return _queue(alerts) if alerts else 0


def slack_alert_send(timer: Timer) -> None:
    """The timer handler: post the alert; a refusal raises (the timer fails, visibly)."""
    url = settings.SLACK_WEBHOOK_URL
    if not url:
        raise RuntimeError("SLACK_WEBHOOK_URL is not set")
    response = requests.post(url, json={"text": timer.payload["text"]}, timeout=TIMEOUT)
    response.raise_for_status()


def register() -> None:
    timer_handler_register(TIMER_KIND, slack_alert_send)
