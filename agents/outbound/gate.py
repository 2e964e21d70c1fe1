"""The send gate: every outbound message and call, automated or human, goes
through `message_send`, and nothing else calls a provider.

Checks, in order; the first that fails decides and is recorded:
0. the recipient's number (`number_not_allowed`): outside the business's
   contact countries, or of a type that must not get this channel
   (crm.services.contact_numbers) — even for a compliance reply, since a
   premium-rate number texting HELP is the pumping attack itself;
1. hold and stop flags — the lead on hold (`hold`); automation paused for the
   person, or the lead closed (`stopped`, automated sends only) — a won
   lead's after-sale texts (the review request: AFTER_SALE_TEMPLATES) alone
   still go to a closed lead;
2. consent for the channel (`revoked`, `no_consent`: agents.consent.policy);
   for an Instagram DM, Meta's 24-hour window after the person's last DM
   (`outside_window`) in its place; and for an automated text or call, no
   revocation by the person on any channel, number or handle (`revoked`);
3. quiet hours in the recipient's local time → deferred to the next opening
   (texts and calls): the business's hours (the federal 08:00–21:00 by
   default) narrowed by the rules of the recipient's state by area code and
   by ZIP code, the stricter of each (agents/outbound/state_rules.py); the
   days and holidays a state bars are barred to automated sends (what the
   gate treats as solicitation), not to a person answering a person;
4. the per-contact daily cap (`daily_cap`, automated sends only);
5. no other automated path active for the person (`other_path_active`);
6. a state's cap on marketing texts and calls per 24 hours (Florida, Oklahoma,
   Maryland: 3) → deferred until the oldest of them is 24 hours old
   (`state_cap`, automated texts and calls only: an automated send is what
   the gate treats as marketing; a person's own reply in a conversation is not
   capped, though it counts towards the cap).
Then: waiting for a person's approval (`pending_approval`), recorded as it
would be sent (`dry_run`, SEND_MODE=dry_run), or queued for the provider.
Every result writes a receipt. A compliance reply (a STOP/START/HELP
confirmation) skips the checks it must not be subject to.

At most one send per intended message (invariant 7): the Message row, unique
by its idempotency key, exists before any provider call; a second call with
the same key returns the first row untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.consent.policy import consent_decide, revoked_elsewhere
from agents.outbound.instagram import instagram_account_for
from agents.outbound.local_hours import Window, next_allowed, window_for
from agents.outbound.marketplace import MARKETPLACE_CHANNELS, thread_for, thread_source_key
from agents.outbound.twilio_accounts import messaging_service_for, twilio_sources
from crm.models import (
    CLOSED_STAGES,
    Business,
    Contact,
    ContactPoint,
    Enrollment,
    Lead,
    Message,
    Stage,
)
from crm.services.contact_numbers import number_refusal
from crm.services.insert_once import row_insert_once
from crm.services.receipts import receipt_write
from crm.services.timers import timer_schedule

POINT_KIND = {
    "sms": "phone",
    "voice": "phone",
    "email": "email",
    "instagram": "instagram",
    # A marketplace thread: the person's handle there (agents.outbound.marketplace).
    "thumbtack": "thumbtack",
    "yelp": "yelp",
}
REGATE_TIMER = "outbound.regate"
# The daily cap counts a person's sends in this window before a send (rolling, not per calendar day).
CAP_WINDOW = timedelta(hours=24)
# Automated texts and calls: what one revocation on any channel stops.
AUTOMATED_CALLS_AND_TEXTS = ("sms", "voice")
# The automated texts a won lead may still get: what comes after the sale
# (agents/reviews/requests.py). Every other automated send stops at a closed stage.
AFTER_SALE_TEMPLATES = frozenset({"review_request", "review_request_email"})
# A state's cap counts texts and calls: the statutes cap "calls", and count texts as calls.
STATE_CAP_CHANNELS = ("sms", "voice")


@dataclass(frozen=True)
class Verdict:
    status: str  # a Message status: blocked, deferred, pending_approval, dry_run, queued
    reason: str = ""
    deferred_until: datetime | None = None
    detail: str = ""  # said in the receipt beside the reason
    # The daily cap's count, when the check reached it: the person's sends in
    # the CAP_WINDOW before `now` (the sequence preview adds its projected ones).
    sent_today: int | None = None


def recipient_point(contact: Contact, channel: str) -> ContactPoint | None:
    kind = POINT_KIND.get(channel, "phone")
    points = [p for p in contact.points.all() if p.kind == kind and p.is_valid]
    if channel == "instagram" and len(points) > 1:
        # An Instagram-scoped id belongs to one of the business's accounts:
        # answer the handle the person last wrote from.
        latest = (
            Message.objects.filter(contact_point__in=points, direction="in")
            .order_by("-created_at", "-pk")
            .values_list("contact_point_id", flat=True)
            .first()
        )
        return next((p for p in points if p.pk == latest), None) or min(points, key=lambda p: (p.created_at, p.pk))
    return min(points, key=lambda p: (p.created_at, p.pk), default=None)


def sender_for(contact: Contact, channel: str, *, point: ContactPoint | None = None, to: str = "") -> str:
    """One sending number per person: a Messaging Service keeps the sender
    sticky itself; otherwise the first number this person got a text from is
    pinned on the contact. Only the business's own: a Messaging Service or
    number named on its Twilio sources (the server's Messaging Service is the
    fallback), and a pinned number that is not (any more) one of them is
    replaced, never used. A DM goes from the Instagram account the person
    wrote to (`point`: their handle); a marketplace reply from the source its
    thread (`to`) came in through."""
    if channel == "email":
        return str(settings.DEFAULT_FROM_EMAIL)
    if channel == "instagram":
        return instagram_account_for(contact.business_id, point)
    if channel in MARKETPLACE_CHANNELS:
        return thread_source_key(contact.business_id, channel, to)
    every = twilio_sources(contact.business_id)
    if channel == "sms" and (service := messaging_service_for(contact.business_id, sources=every)):
        return service  # calls need a number: they take the pinned one below
    sources = [s for s in every if s.is_active]
    own = [str(s.config["phone_number"]) for s in sources if s.config.get("phone_number")]
    if contact.sticky_from_number and contact.sticky_from_number in own:
        return contact.sticky_from_number
    number = own[0] if own else ""
    if number != contact.sticky_from_number:
        Contact.objects.filter(pk=contact.pk, sticky_from_number=contact.sticky_from_number).update(
            sticky_from_number=number
        )
        contact.sticky_from_number = number
    return number


def gate_check(message: Message, *, automated: bool, compliance_reply: bool, now: datetime) -> Verdict:
    lead, contact = message.lead, message.contact
    assert contact is not None
    point = message.contact_point
    refusal = number_refusal(contact.business, point.value, message.channel) if point is not None else ""
    if refusal:
        return Verdict(Message.Status.BLOCKED, "number_not_allowed", detail=refusal)
    if compliance_reply:
        return Verdict(Message.Status.QUEUED)
    if lead is not None and lead.hold:
        return Verdict(Message.Status.BLOCKED, "hold")
    if automated and (contact.automation_paused or (lead is not None and _closed_to(lead, message))):
        return Verdict(Message.Status.BLOCKED, "stopped")
    if point is None:
        return Verdict(Message.Status.BLOCKED, "no_consent")
    if point.contact_id == contact.pk:
        point.contact = contact  # the same row, already loaded (with its business): no second read
    consent = consent_decide(point, message.channel, automated=automated, now=now)
    if not consent.allowed:
        return Verdict(
            Message.Status.BLOCKED, consent.reason, detail=consent.basis if consent.reason == "outside_window" else ""
        )
    if automated and message.channel in AUTOMATED_CALLS_AND_TEXTS:
        elsewhere = revoked_elsewhere(contact)
        if elsewhere:
            return Verdict(Message.Status.BLOCKED, "revoked", detail=elsewhere)
    # Quiet hours are for texts and calls, never DMs. A DM can only answer a
    # person who wrote to the business on Instagram within the last 24 hours
    # (the window above): a reply in a conversation they opened, read in the
    # app when they choose, not a phone ringing or buzzing at night. Deferring
    # it to the morning could also carry it past the window, and Meta would
    # then refuse what the person was waiting for; and an Instagram id says
    # nothing of the person's time zone. Automated DMs keep the daily cap and
    # the one-path rule below, as texts do.
    window: Window | None = None
    if message.channel in ("sms", "voice"):
        window = window_for(point.value, contact.business, contact.postal_code, solicitation=automated)
        opens = next_allowed(now, window)
        if opens is not None:
            return Verdict(Message.Status.DEFERRED, "quiet_hours", opens, detail=_states_detail(window))
    if automated:
        sent_today, other_path_active = _automation_counts(message, contact, now)
        if daily_cap_reached(contact.business, sent=sent_today):
            return Verdict(Message.Status.BLOCKED, "daily_cap", sent_today=sent_today)
        if other_path_active:
            return Verdict(Message.Status.BLOCKED, "other_path_active", sent_today=sent_today)
        capped = window.capped_by() if window is not None else None
        if capped is not None and capped.cap_per_24h is not None:
            frees = state_cap_frees_at(message, contact, capped.cap_per_24h, now)
            if frees is not None:
                detail = f"{capped.state}: at most {capped.cap_per_24h} in 24 hours ({capped.source})"
                return Verdict(Message.Status.DEFERRED, "state_cap", frees, detail=detail, sent_today=sent_today)
        return Verdict(Message.Status.QUEUED, sent_today=sent_today)
    return Verdict(Message.Status.QUEUED)


def _closed_to(lead: Lead, message: Message) -> bool:
    """The lead's stage stops this automated send: every closed stage does,
    but a won lead still gets its after-sale texts."""
    if lead.stage not in CLOSED_STAGES:
        return False
    return not (lead.stage == Stage.WON and message.template_key in AFTER_SALE_TEMPLATES)


def _states_detail(window: Window) -> str:
    """Which states' rules narrowed the window, for the receipt ("" for none)."""
    return f"state rules of {', '.join(r.state for r in window.rules)}" if window.rules else ""


def state_cap_frees_at(message: Message, contact: Contact, cap: int, now: datetime) -> datetime | None:
    """None while the person has had fewer than `cap` texts and calls from the
    business in the CAP_WINDOW before `now` (this message aside); else the
    moment enough of them are 24 hours old for one more. Each counts from when
    it left (sent, else queued, else created: a dry run's moment), a person's
    replies too: the statutes count every call on the subject, and the gate
    cannot tell a reply's subject from the follow-up's."""
    times = sorted(
        Message.objects.filter(
            contact=contact,
            direction="out",
            channel__in=STATE_CAP_CHANNELS,
            status__in=Message.WENT_OUT,
        )
        .exclude(pk=message.pk)
        .annotate(left_at=Coalesce("sent_at", "queued_at", "created_at"))
        .filter(left_at__gt=now - CAP_WINDOW, left_at__lte=now)
        .values_list("left_at", flat=True)
    )
    if len(times) < cap:
        return None
    # With n in the window, one more may go once only cap - 1 remain in it:
    # when the (n - cap + 1)th oldest leaves the window.
    return times[len(times) - cap] + CAP_WINDOW


def daily_cap_reached(business: Business, *, sent: int, projected: int = 0) -> bool:
    """Whether the business's daily cap leaves no room for one more automated
    send to a person: `sent` is their sends on record in the CAP_WINDOW before
    it, `projected` those a dry run expects to have gone out in it as well."""
    return sent + projected >= business.max_texts_per_day


def _automation_counts(message: Message, contact: Contact, now: datetime) -> tuple[int, bool]:
    """The daily cap's count (the person's sends in the CAP_WINDOW, this
    message aside) and whether another automated path is active for them,
    read in one query: the checks stay in order, the round trips halve."""
    sent = (
        Message.objects.filter(
            contact=OuterRef("pk"),
            direction="out",
            status__in=Message.WENT_OUT,
            created_at__gte=now - CAP_WINDOW,
        )
        .exclude(pk=message.pk)
        .order_by()
        .values("contact")
        .annotate(n=Count("pk"))
        .values("n")
    )
    active = Enrollment.objects.filter(contact=OuterRef("pk"), status=Enrollment.Status.ACTIVE)
    if message.enrollment_id:
        active = active.exclude(pk=message.enrollment_id)
    counts = (
        Contact.objects.filter(pk=contact.pk)
        .annotate(sent_today=Coalesce(Subquery(sent, output_field=IntegerField()), 0), other_path=Exists(active))
        .values_list("sent_today", "other_path")
        .get()
    )
    return int(counts[0]), bool(counts[1])


# No savepoints of their own (savepoint=False): when the caller already has a
# transaction, a failure here fails the caller's whole change, which is what
# every caller wants; a duplicate key is not a failure (see row_insert_once).
@transaction.atomic(savepoint=False)
def message_send(
    *,
    lead: Lead,
    channel: str,
    body: str,
    actor: str,
    idempotency_key: str,
    automated: bool,
    template_key: str = "",
    subject: str = "",
    needs_approval: bool = False,
    compliance_reply: bool = False,
    enrollment: Enrollment | None = None,
    requested_by: Any = None,
    now: datetime | None = None,
    lead_locked: bool = False,
    draft_reason: str = "",
) -> Message:
    """Create the intended message (once per idempotency key) and pass it
    through the gate. Returns the message in its resulting status.

    `draft_reason`: why a drafted text is what it is and whether it waits
    for a person (a model's draft: what it relies on, what the claims guard
    found); kept on the message and named in its approval request.

    `lead_locked`: the caller read `lead` (with its business) and `lead.contact`
    in its current transaction under their row locks, so they are current and
    stay so until commit; the gate then judges those very objects instead of
    reading the new message, lead and contact back (the sequence engine's
    steps). Without it the gate reads them afresh, as it always may.
    """
    now = now or timezone.now()
    contact = lead.contact
    point = recipient_point(contact, channel)
    message = Message(
        business=lead.business,
        lead=lead,
        contact=contact,
        contact_point=point,
        direction="out",
        channel=channel,
        status=Message.Status.DRAFT,
        body=body,
        subject=subject,
        template_key=template_key,
        # A marketplace reply goes into the thread, not to the person's handle.
        to=(thread_for(lead, channel) if channel in MARKETPLACE_CHANNELS else point.value) if point else "",
        idempotency_key=idempotency_key,
        actor=actor,
        automated=automated,
        enrollment=enrollment,
        draft_reason=draft_reason,
        created_at=now,
    )
    # The unique idempotency key decides; a key already taken (by this
    # intended message, sent before or being sent concurrently) inserts nothing.
    if not row_insert_once(message, key="idempotency_key"):
        return Message.objects.get(idempotency_key=idempotency_key)  # never a second send
    if not lead_locked:
        return message_gate(
            message,
            compliance_reply=compliance_reply,
            needs_approval=needs_approval,
            requested_by=requested_by,
            now=now,
        )
    if contact.business_id == lead.business_id:
        contact.business = lead.business
    # Just inserted in this transaction: no one else can see (or lock) the row yet.
    return _gate(
        message, compliance_reply=compliance_reply, needs_approval=needs_approval, requested_by=requested_by, now=now
    )


@transaction.atomic(savepoint=False)
def message_gate(
    message: Message,
    *,
    compliance_reply: bool = False,
    needs_approval: bool = False,
    requested_by: Any = None,
    now: datetime | None = None,
) -> Message:
    """(Re-)run the gate for a draft or deferred message and act on the verdict."""
    now = now or timezone.now()
    message = (
        Message.objects.select_for_update(of=("self",))
        .select_related("lead", "contact__business", "contact_point")
        .get(pk=message.pk)
    )
    if message.status not in (Message.Status.DRAFT, Message.Status.DEFERRED, Message.Status.PENDING_APPROVAL):
        return message  # already decided: a redelivered task changes nothing
    return _gate(
        message, compliance_reply=compliance_reply, needs_approval=needs_approval, requested_by=requested_by, now=now
    )


def _gate(
    message: Message, *, compliance_reply: bool, needs_approval: bool, requested_by: Any, now: datetime
) -> Message:
    """Judge a message the caller holds current (locked, or just inserted) and act on the verdict."""
    verdict = gate_check(message, automated=message.automated, compliance_reply=compliance_reply, now=now)
    if verdict.status == Message.Status.QUEUED and needs_approval:
        verdict = Verdict(Message.Status.PENDING_APPROVAL, "")
    if verdict.status == Message.Status.QUEUED:
        assert message.contact is not None
        message.from_number = sender_for(message.contact, message.channel, point=message.contact_point, to=message.to)
        if settings.SEND_MODE != "live":
            verdict = Verdict(Message.Status.DRY_RUN)
    before = message.status
    # A blocked message keeps why; so does a deferred one while it waits (quiet
    # hours, a state's cap), so the thread can say which; anything else clears it.
    waiting = verdict.status in (Message.Status.BLOCKED, Message.Status.DEFERRED)
    message.status, message.block_reason = verdict.status, verdict.reason if waiting else ""
    message.deferred_until = verdict.deferred_until
    # The lost-enqueue sweep's clock: the queue's wall time, not the judged `now`.
    message.queued_at = timezone.now() if verdict.status == Message.Status.QUEUED else None
    message.save(update_fields=["status", "block_reason", "deferred_until", "from_number", "queued_at"])
    _after(message, verdict, before, requested_by)
    return message


def _after(message: Message, verdict: Verdict, before: str, requested_by: Any) -> None:
    receipt_write(
        business=message.business,
        lead=message.lead,
        subject=message.public_id,
        actor="agent:send_gate",
        action=f"message.{verdict.status}",
        reason=f"{verdict.reason}: {verdict.detail}" if verdict.detail else verdict.reason,
        before={"status": before},
        after={
            "status": verdict.status,
            "channel": message.channel,
            "to": message.to,
            "from": message.from_number,
            "body": message.body,
            "deferred_until": verdict.deferred_until,
            "requested_by": message.actor,
        },
    )
    if verdict.status == Message.Status.DEFERRED and verdict.deferred_until:
        timer_schedule(
            business=message.business,
            lead=message.lead,
            kind=REGATE_TIMER,
            due_at=verdict.deferred_until,
            payload={"message": message.pk},
            dedupe_key=f"{REGATE_TIMER}:{message.pk}:{verdict.deferred_until.isoformat()}",
        )
    if verdict.status == Message.Status.PENDING_APPROVAL:
        from approvals.services import approval_request_open

        approval_request_open(
            business=message.business,
            lead=message.lead,
            kind="message_draft",
            summary=f"Approve a {message.channel} to {message.to}: {message.body[:120]}"
            + (f" — {message.draft_reason}" if message.draft_reason else ""),
            proposed_by=message.actor,
            # A person's draft names them, so neither the service nor the
            # database lets them approve it themselves.
            proposed_by_user=requested_by,
            payload={"message": message.public_id, "body": message.body},
        )
    if verdict.status == Message.Status.QUEUED:
        # Imported here: dispatch's module reaches the provider SDK, which the gate never needs.
        from agents.outbound.dispatch import dispatch_enqueue

        dispatch_enqueue(message.pk)
