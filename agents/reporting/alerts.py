"""Slack alerts for what cannot wait for tomorrow's brief: an SLA breach, a
complaint, and a burst of failed webhooks.

An alert is a Timer row (kind `reporting.slack_alert`) keyed by what it is
about (`alert:sla:<lead>`, `alert:complaint:<lead>`,
`alert:webhooks:<hour>`): the unique dedupe key makes each alert exist once
however many scans find it, and the timer runner's claim makes it post once;
a post Slack refuses leaves the timer `failed` with the error, visible in the
admin. A business's alerts go to its own webhook (business file
`notifications: {slack_webhook_url: ...}`), else to the operator's
`SLACK_WEBHOOK_URL`; nothing is queued for a business with neither. The
webhook burst concerns the whole installation and goes to the operator's
webhook only. Names and other text from outside are Slack-escaped.

`alerts_run` (the `leadops.alerts` job, each minute) scans, looking back a day,
so a breach or complaint is announced within a minute or two of being
recorded; `alert_raise` lets any role queue an alert of its own.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from agents.notify import slack_escape, slack_post, slack_webhook_for
from approvals.models import ApprovalRequest
from crm.localtime import when, zone_or_none
from crm.models import CLOSED_STAGES, Business, InboundEvent, Lead, Timer
from crm.services.timers import timer_handler_register, timer_schedule, timers_run_due

TIMER_KIND = "reporting.slack_alert"
LOOKBACK = timedelta(days=1)
BURST_WINDOW = timedelta(minutes=15)
BURST_THRESHOLD = 5


def _link(path: str) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + path


def alert_raise(*, business: Business, key: str, text: str, lead: Lead | None = None) -> Timer | None:
    """Queue one Slack alert for `key` (once ever per key). `text` is posted as
    it is: escape what came from outside with `slack_escape`."""
    if not slack_webhook_for(business):
        return None
    return timer_schedule(
        business=business,
        kind=TIMER_KIND,
        due_at=timezone.now(),
        lead=lead,
        payload={"text": text},
        dedupe_key=f"alert:{key}"[:200],
    )


def _queue(alerts: list[Timer]) -> int:
    existing = set(
        Timer.objects.filter(dedupe_key__in=[a.dedupe_key for a in alerts]).values_list("dedupe_key", flat=True)
    )
    fresh = [a for a in alerts if a.dedupe_key not in existing]
    Timer.objects.bulk_create(fresh, ignore_conflicts=True)
    return len(fresh)


def alerts_scan(*, now: datetime | None = None) -> int:
    """Queue the alerts due now; returns how many are new."""
    operator = bool(settings.SLACK_WEBHOOK_URL)
    if not operator and not Business.objects.exclude(slack_webhook_url="").exists():
        return 0
    now = now or timezone.now()
    alerts: list[Timer] = []
    esc = slack_escape

    def add(business: Business | int, key: str, text: str, lead_id: int | None = None) -> None:
        # A business's alert needs its webhook; an id alone files an operator's alert.
        if isinstance(business, Business) and not slack_webhook_for(business):
            return
        operator_only = not isinstance(business, Business)
        alerts.append(
            Timer(
                business_id=business if isinstance(business, int) else business.pk,
                lead_id=lead_id,
                kind=TIMER_KIND,
                due_at=now,
                payload={"text": text, "operator": True} if operator_only else {"text": text},
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
        # The team reads the alert on the business's clock.
        zone = zone_or_none(lead.business.timezone)
        add(
            lead.business,
            f"sla:{lead.public_id}",
            f":rotating_light: {esc(lead.business.name)}: first response overdue for "
            f"{esc(lead.contact.name or lead.public_id)} "
            f"({lead.public_id}, owner {esc(owner)}) since {when(lead.sla_breached_at, '%H:%M', zone)} — "
            f"{_link(reverse('admin:crm_lead_change', args=[lead.pk]))}",
            lead.pk,
        )

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
            lead.business,
            f"complaint:{lead.public_id}",
            f":warning: {esc(lead.business.name)}: complaint from {esc(lead.contact.name or lead.public_id)} "
            f"({lead.public_id}); "
            f"automation is paused until a person decides — {_link(reverse('admin:crm_lead_change', args=[lead.pk]))}",
            lead.pk,
        )

    failed = list(
        InboundEvent.objects.filter(status=InboundEvent.Status.FAILED, received_at__gte=now - BURST_WINDOW).values_list(
            "business_id", "provider"
        )
    )
    if operator and len(failed) >= BURST_THRESHOLD:
        # The operator's concern, not one business's: announced once an hour
        # for the whole installation on the operator's webhook, filed under
        # the first business.
        home = Business.objects.order_by("pk").values_list("pk", flat=True).first()
        if home is not None:
            by_provider = Counter(provider for _, provider in failed)
            detail = ", ".join(f"{p}: {n}" for p, n in by_provider.most_common())
            add(
                home,
                f"webhooks:{now:%Y-%m-%dT%H}",
                f":fire: {len(failed)} webhook deliveries failed in the last {BURST_WINDOW.seconds // 60} minutes "
                f"({detail}) — {_link(reverse('admin:crm_inboundevent_changelist') + '?status__exact=failed')}",
            )
    return _queue(alerts) if alerts else 0


def alerts_run(*, now: datetime | None = None, limit: int = 200) -> dict[str, int]:
    """The alerts job: queue what is new, then post the alerts due (at most
    `limit` a run; the rest wait for the next)."""
    queued = alerts_scan(now=now)
    posted = timers_run_due(now=now, kinds=[TIMER_KIND], limit=limit)
    return {"alerts_queued": queued, "posted": posted.done, "failed": posted.failed}


def slack_alert_send(timer: Timer) -> None:
    """The timer handler: post the alert to its business's webhook (the
    operator's for installation-wide ones); a refusal raises (the timer
    fails, visibly)."""
    operator = timer.payload.get("operator")
    url = str(settings.SLACK_WEBHOOK_URL or "") if operator else slack_webhook_for(timer.business)
    if not url:
        raise RuntimeError("no Slack webhook: set the business's slack_webhook_url or SLACK_WEBHOOK_URL")
    slack_post(url, timer.payload["text"])


def register() -> None:
    timer_handler_register(TIMER_KIND, slack_alert_send, own_job=True)  # posts to Slack: the alerts job runs it
