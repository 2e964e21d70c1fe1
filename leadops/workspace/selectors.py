"""Reads for the setters' workspace: who is looking (their zone), the inbox's
rows as the page words them, one lead's thread, and the versions the live
fragments poll with.

The inbox itself is `crm.inbox` (visibility, filters, order, unread counts);
the seven answers are the trace's (`agents.reporting.trace`); what the
active path will do is the sequence engine's preview. This module puts
them in the shape the pages show, in a fixed number of queries per page
however many leads or messages there are.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django.db.models import Count, Max, OuterRef, Subquery

from agents.followup.sequences.preview import sequence_preview
from agents.outbound.line_type import lines_known
from agents.playbook.copilot import Offer, model_draft_key, reply_offer
from agents.reporting.trace import Answer, lead_trace
from crm import inbox
from crm.inbox import SLA_SOON, InboxPage, InboxQuery, inbox_page, unread_conversations, who_default
from crm.models import (
    BEFORE_BOOKING_STAGES,
    Business,
    Call,
    ConversationRead,
    Enrollment,
    Lead,
    LeadTouch,
    Message,
    Note,
    Receipt,
    Review,
    Role,
    Source,
    TeamMember,
)
from crm.permissions import can, grants_for
from crm.selectors import lead_list_visible, reads_shared, scope_for
from leadops.workspace.held import Held, thread_approvals

RUNNING = (Enrollment.Status.ACTIVE, Enrollment.Status.WAITING)


# --------------------------------------------------------------- the viewer


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the region typed phone numbers are read in, and
    whether they lead a team. (Their time zone is the request's: the
    viewer-zone middleware activates it for every page.)"""

    region: str
    leads_a_team: bool


def viewer_for(user: Any) -> Viewer:
    grants = grants_for(user)
    region = (
        TeamMember.objects.filter(user=user, is_active=True)
        .order_by("pk")
        .values_list("business__region", flat=True)
        .first()
    )
    leads = grants.everything or any(m.role in (Role.OWNER, Role.MANAGER) for m in grants.memberships)
    return Viewer(region=region or "US", leads_a_team=leads)


# --------------------------------------------------------------- words


def duration_words(delta: timedelta) -> str:
    """A span as a setter says it: "<1 min", "12 min", "2 h", "3 d"."""
    minutes = int(abs(delta).total_seconds() // 60)
    if minutes < 1:
        return "<1 min"
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 48 * 60:
        return f"{minutes // 60} h"
    return f"{minutes // (24 * 60)} d"


def why_here(lead: Lead, now: datetime) -> tuple[str, str]:
    """Why the row sits where it does, in words and as a kind for its colour:
    the bucket `crm.inbox` put it in (annotated as `bucket`)."""
    bucket = getattr(lead, "bucket", inbox.REST)
    conversation = getattr(lead, "conversation", None)
    if bucket in (inbox.URGENT, inbox.HELD, inbox.WAITING) and conversation is not None:
        waited = duration_words(now - conversation.awaiting_since) if conversation.awaiting_since else ""
        if conversation.held_since is not None:
            held = duration_words(now - conversation.held_since)
            words = f"waiting on a manager's approval, {held}"
        else:
            words = f"waiting {waited}"
            missed = missed_answer_words(conversation.missed_answer)
            if missed:
                words += f" — {missed}"
        if bucket == inbox.URGENT:
            return f"urgent, {words}", "urgent"
        return words, "held" if bucket == inbox.HELD else "waiting"
    if bucket == inbox.SLA_DUE and lead.sla_due_at is not None:
        if lead.sla_due_at > now:
            return f"SLA due in {duration_words(lead.sla_due_at - now)}", "sla"
        return f"SLA breached {duration_words(now - lead.sla_due_at)} ago", "breached"
    if bucket == inbox.OVERDUE and lead.next_action_due_at is not None:
        return f"next action overdue {duration_words(now - lead.next_action_due_at)}", "overdue"
    if lead.hold:
        return "on hold", "hold"
    return "", ""


# A gate's block reason in words (the thread's verdicts say them too).
BLOCKED_WORDS = {
    "hold": "the lead is on hold",
    "stopped": "automation is stopped for this person, or the lead is closed",
    "no_consent": "no consent for this channel",
    "revoked": "the person opted out",
    "quiet_hours": "quiet hours",
    "daily_cap": "the daily cap for this person is reached",
    # Deferred, not blocked: it goes once the oldest of those is 24 hours old.
    "state_cap": "their state allows no more marketing texts or calls in 24 hours",
    "other_path_active": "another automated path is running for this person",
    "rejected": "a manager rejected it",
    "expired": "nobody approved it in time",
    "number_not_allowed": "this number may not get this channel",
    "outside_window": "the 24-hour window to answer a DM has closed",
    "cannot_text": "the number is a landline or toll-free: call instead",
}


def missed_answer_words(message: Message | None) -> str:
    """Why the person's answer did not reach them ("" when nothing was missed)."""
    if message is None:
        return ""
    if message.block_reason == Message.BlockReason.REJECTED:
        return "a manager rejected the answer"
    if message.status == Message.Status.BLOCKED:
        return "the answer was blocked: " + BLOCKED_WORDS.get(message.block_reason, "by the send gate")
    if message.status in (Message.Status.FAILED, Message.Status.UNDELIVERED):
        return "the answer was not delivered"
    return ""


# --------------------------------------------------------------- the inbox


@dataclass(frozen=True)
class InboxRow:
    lead: Lead
    name: str
    initials: str
    source: str
    last: Message | None
    last_at: datetime | None
    unread: int
    waiting: bool
    why: str
    why_kind: str
    intent: str = ""  # of the person's last message


def inbox_rows(page: InboxPage, *, now: datetime) -> list[InboxRow]:
    """The page's rows as the inbox words them (no query: `crm.inbox` read
    everything a row shows)."""
    rows = []
    for lead in page.rows:
        conversation = getattr(lead, "conversation", None)
        contact = lead.contact
        name = contact.name or lead.public_id
        why, kind = why_here(lead, now)
        source = getattr(lead, "first_source", None) or getattr(lead, "first_provider", None) or ""
        rows.append(
            InboxRow(
                lead=lead,
                name=name,
                initials=_initials(contact.first_name, contact.last_name) or "?",
                source=str(source).replace("_", " "),
                last=conversation.last_message if conversation is not None else None,
                last_at=conversation.last_message_at if conversation is not None else None,
                unread=int(getattr(lead, "unread", 0) or 0),
                waiting=conversation is not None and conversation.awaiting_since is not None,
                why=why,
                why_kind=kind,
                intent=str(getattr(lead, "last_intent", "") or ""),
            )
        )
    return rows


def _initials(first: str, last: str) -> str:
    return "".join(part[:1].upper() for part in (first.strip(), last.strip()) if part)


@dataclass(frozen=True)
class InboxScreen:
    rows: list[InboxRow]
    page: InboxPage
    version: str
    unread: int


def inbox_read(
    user: Any, query: InboxQuery, *, page: int, now: datetime, region: str, version: str | None = None
) -> InboxScreen:
    """One page of the inbox as the page shows it, the version it shows (the
    caller's, when it has just read it) and the top bar's unread count."""
    # The version first: a change that commits between the two reads is
    # then on the page under an older version, and the next poll shows the
    # page again; the other order would hide it until the next change.
    version = version or inbox_version(user, now=now)
    found = inbox_page(user, query, now=now, page=page, region=region)
    return InboxScreen(inbox_rows(found, now=now), found, version, unread_conversations(user))


def source_choices(user: Any) -> list[tuple[str, str]]:
    """The sources the inbox may be filtered by: the businesses' configured
    sources by key (the providers without one are matched by name too)."""
    scope = scope_for(user, "message.view")
    sources = Source.objects.all() if scope.everything else Source.objects.filter(business_id__in=_business_ids(user))
    return [(key, f"{key} ({provider})") for key, provider in sources.order_by("key").values_list("key", "provider")]


def _business_ids(user: Any) -> list[int]:
    return sorted({m.business_id for m in grants_for(user).memberships})


def inbox_version(user: Any, *, now: datetime) -> str:
    """What the inbox shows changes only when something is recorded in the
    user's businesses, when the user reads a conversation, or when the
    clock moves its words ("waiting 12 min") on.

    Computed from cheap reads, not from the page: every handoff writes a
    receipt (the receipt chain), so the businesses' receipt high-water marks
    change with every message in or out, delivery status, reassignment,
    next action or note. A receipt is sealed into its business's chain in
    the order the transactions committed, so the highest `seq` never misses
    a receipt that committed late with a lower id; the newest unsealed one
    covers the moment between its commit and its seal. Each is one step down
    an index per business (`crm_receipt_unique_seq`, the partial
    `crm_receipt_unsealed_idx`), one query for all of them; the user's read
    marks are one more.
    """
    grants = grants_for(user)
    businesses = Business.objects.all() if grants.everything else Business.objects.filter(pk__in=_business_ids(user))
    marks = list(
        businesses.order_by("pk").values_list(
            "pk",
            Subquery(
                Receipt.objects.filter(business=OuterRef("pk"), seq__isnull=False).order_by("-seq").values("seq")[:1]
            ),
            Subquery(
                Receipt.objects.filter(business=OuterRef("pk"), seq__isnull=True).order_by("-id").values("id")[:1]
            ),
        )
    )
    read = ConversationRead.objects.filter(user=user).aggregate(at=Max("read_at"), n=Count("pk"))
    return _digest(marks, read["at"], read["n"], f"{now:%Y%m%d%H%M}")


def _digest(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


# --------------------------------------------------------------- the thread


def lead_for_thread(user: Any, public_id: str) -> Lead | None:
    """The lead, if `user` may see its conversation (a technician's lead, or
    another business's, is None), with what the thread page reads of it."""
    return (
        lead_list_visible(user, "message.view")
        .select_related("business", "contact__business", "owner__user", "service_line", "conversation")
        .prefetch_related("contact__points")
        .filter(public_id=public_id)
        .first()
    )


@dataclass(frozen=True)
class ThreadItem:
    """One entry of the conversation, in time order: a message, a call, a
    note, or a review the customer left (matched to the lead)."""

    kind: str
    at: datetime
    message: Message | None = None
    call: Call | None = None
    note: Note | None = None
    touch: LeadTouch | None = None
    first: bool = False
    held: Held | None = None  # a message's approval: why it waits, or what became of it
    review: Review | None = None


@dataclass(frozen=True)
class PlannedStep:
    step: int
    channel: str
    due_at: datetime
    body: str
    verdict: str
    reason: str
    owner: str | None


@dataclass(frozen=True)
class Automation:
    """The active (or waiting) path, its next steps and what stops it."""

    enrollment: Enrollment | None
    steps: list[PlannedStep]
    stops: Answer
    ended: Enrollment | None = None


@dataclass(frozen=True)
class Clock:
    """A due time as the header says it: when, and how it stands now."""

    at: datetime | None
    words: str
    kind: str  # ok, soon, late, done or ""


@dataclass(frozen=True)
class Composer:
    """What the composer offers, and whether to start with the suggestion in
    the box: only when the person waits and the suggestion answers what they
    last wrote (a playbook reply to it, or a model's draft for it), never a
    text that already went out to them. A lead that never wrote starts
    empty: its acknowledgement is the automated first response's, and it
    has usually gone out already."""

    offer: Offer
    awaiting: bool
    prefill: bool
    # What the suggestion answers, as the chip says it: the intent of the
    # person's last message and who drafted it ("playbook", a model's name).
    answers: str = ""
    author: str = ""


def composer_read(
    lead: Lead, last_in: Message | None = None, *, looked: bool = False, messages: list[Message] | None = None
) -> Composer:
    """The composer for `lead` (from `lead_for_thread`); `looked`: the caller
    already looked up the person's last message (`last_in`); `messages`: the
    conversation it read, where a model's draft answering it is found (else
    it is looked up)."""
    if not looked:
        last_in = Message.objects.filter(lead=lead, direction="in").order_by("-created_at", "-pk").first()
    conversation = getattr(lead, "conversation", None)
    awaiting = conversation is not None and conversation.awaiting_since is not None
    model_draft = None
    if last_in is not None:
        key = model_draft_key(last_in)
        if messages is None:
            model_draft = Message.objects.filter(idempotency_key=key).first()
        else:
            model_draft = next((m for m in messages if m.idempotency_key == key), None)
    offer = reply_offer(lead, last_in.body if last_in else None, model_draft=model_draft)
    suggested = offer.suggested
    if last_in is None:
        return Composer(offer, awaiting, prefill=False)
    answers = last_in.intent or "other"
    author = suggested.author or "playbook"
    if not suggested.body.strip():
        return Composer(offer, awaiting, prefill=False, answers=answers, author=author)
    # The model's own waiting draft is the suggestion, not a text that went out.
    went_out = _sent_bodies(lead, messages, but=model_draft.pk if model_draft is not None else None)
    prefill = awaiting and suggested.body.strip() not in went_out
    return Composer(offer, awaiting, prefill=prefill, answers=answers, author=author)


def _sent_bodies(lead: Lead, messages: list[Message] | None, *, but: int | None) -> set[str]:
    """The texts that went out to the person (or wait to), but message
    `but`: what the composer never suggests again."""
    gone = ("draft", "blocked", "failed", "undelivered")
    if messages is None:
        messages = list(Message.objects.filter(lead=lead, direction="out").exclude(status__in=gone))
    return {m.body.strip() for m in messages if m.direction == "out" and m.status not in gone and m.pk != but}


@dataclass
class Thread:
    lead: Lead
    answers: dict[str, Answer]
    first_break: str | None
    contact_lines: list[tuple[str, bool]]
    items: list[ThreadItem]
    automation: Automation
    composer: Composer
    last_in: Message | None
    sla: Clock
    next_due: Clock
    owners: list[TeamMember] = field(default_factory=list)
    may: dict[str, bool] = field(default_factory=dict)
    # The pending approvals of the lead the viewer may decide (their panels).
    to_decide: list[Held] = field(default_factory=list)
    # What Twilio Lookup said of each phone's line ({number: "landline"}).
    line_types: dict[str, str] = field(default_factory=dict)


def thread_read(user: Any, lead: Lead, *, now: datetime, tz: tzinfo) -> Thread:
    """Everything the thread page shows of `lead` (from `lead_for_thread`),
    with the trace's times said in `tz`. A fixed number of queries however
    long the conversation is: one per kind of entry (its touches, messages,
    calls, notes, reviews), its approvals (`held`), the trace's and the preview's own
    (per question and per step), and the composer's."""
    with reads_shared():
        messages = list(Message.objects.filter(lead=lead).order_by("created_at", "pk"))
        calls = list(Call.objects.filter(lead=lead).order_by("started_at", "pk"))
        notes = list(Note.objects.filter(lead=lead).select_related("addressee").order_by("created_at", "pk"))
        touches = list(LeadTouch.objects.filter(lead=lead).select_related("source").order_by("received_at", "pk"))
        approvals = thread_approvals(user, lead, messages)
        items = [ThreadItem("touch", t.received_at, touch=t, first=i == 0) for i, t in enumerate(touches)]
        items += [ThreadItem("message", m.created_at, message=m, held=approvals.by_message.get(m.pk)) for m in messages]
        items += [ThreadItem("call", c.started_at, call=c) for c in calls]
        items += [ThreadItem("note", n.created_at, note=n) for n in notes]
        items += [ThreadItem("review", r.posted_at, review=r) for r in Review.objects.filter(lead=lead)]
        items.sort(key=lambda item: item.at)
        last_in = next((m for m in reversed(messages) if m.direction == "in"), None)
        trace = lead_trace(lead, now=now, tz=tz)
        answers = {a.key: a for a in trace.questions}
        may = {
            "send": can(user, "message.send", lead.business_id),
            "change": can(user, "lead.change", lead.business_id),
            "settle": can(user, "conversation.settle", lead.business_id),
            "note": can(user, "note.add", lead.business_id),
            "call": can(user, "call.add", lead.business_id),
            "book": can(user, "appointment.book", lead.business_id),
            "reassign": can(user, "lead.reassign", lead.business_id),
        }
        owners = (
            list(
                TeamMember.objects.filter(business_id=lead.business_id, is_active=True)
                .exclude(role=Role.TECHNICIAN)
                .select_related("user")
                .order_by("display_name", "pk")
            )
            if may["reassign"]
            else []
        )
        return Thread(
            lead=lead,
            answers=answers,
            first_break=trace.first_break,
            # The trace lists each channel's verdict, "; " between them.
            contact_lines=[(part, ": yes" in part) for part in answers["may_contact"].answer.split("; ")],
            items=items,
            automation=_automation(lead, answers["stop_rule"], now=now),
            composer=composer_read(lead, last_in, looked=True, messages=messages),
            last_in=last_in,
            sla=_sla(lead, now),
            next_due=_next_due(lead, now),
            owners=owners,
            may=may,
            to_decide=approvals.to_decide,
            line_types=lines_known([p.value for p in lead.contact.points.all() if p.kind == "phone"]),
        )


def _automation(lead: Lead, stops: Answer, *, now: datetime) -> Automation:
    enrollments = list(lead.enrollments.select_related("sequence").order_by("-created_at", "-pk")[:1])
    latest = enrollments[0] if enrollments else None
    if latest is None or latest.status not in RUNNING:
        return Automation(enrollment=None, steps=[], stops=stops, ended=latest)
    preview = sequence_preview(lead, latest.sequence, now)
    remaining = [p for p in preview if p.step > latest.next_step_index]
    # The preview plays the path from now; the enrollment's own timer says
    # when its next step is due, and the later steps keep the spacing the
    # preview gives them. The verdicts are the gate's on the preview's clock.
    shift = timedelta(0)
    if remaining and latest.next_step_due_at is not None:
        shift = latest.next_step_due_at - remaining[0].due_at
    steps = [
        PlannedStep(
            step=p.step,
            channel=p.channel,
            due_at=p.due_at + shift,
            body=p.body,
            verdict=p.verdict,
            reason=p.reason,
            owner=p.owner,
        )
        for p in remaining
    ]
    return Automation(enrollment=latest, steps=steps, stops=stops)


def _sla(lead: Lead, now: datetime) -> Clock:
    if lead.first_response_at is not None:
        met = lead.sla_due_at is None or lead.first_response_at <= lead.sla_due_at
        took = duration_words(lead.first_response_at - lead.created_at)
        return Clock(lead.first_response_at, f"reached in {took}" + ("" if met else ", after the SLA"), "done")
    if lead.sla_due_at is None or lead.stage not in BEFORE_BOOKING_STAGES:
        # Closed, or a visit is booked: someone reached them, the clock is off.
        return Clock(None, "", "")
    if lead.sla_due_at <= now:
        return Clock(lead.sla_due_at, f"SLA breached {duration_words(now - lead.sla_due_at)} ago", "late")
    kind = "soon" if lead.sla_due_at - now <= SLA_SOON else "ok"
    return Clock(lead.sla_due_at, f"SLA due in {duration_words(lead.sla_due_at - now)}", kind)


def _next_due(lead: Lead, now: datetime) -> Clock:
    due = lead.next_action_due_at
    if not lead.next_action or due is None:
        return Clock(None, "", "")
    if due <= now:
        return Clock(due, f"overdue {duration_words(now - due)}", "late")
    return Clock(due, f"in {duration_words(due - now)}", "soon" if due - now <= SLA_SOON else "ok")


def thread_version(user: Any, lead: Lead, *, now: datetime) -> str:
    """What the thread shows changes when anything is recorded about the
    lead or the lead row itself changes (its owner, next action, hold), or
    when the clock moves its countdowns on.

    Computed from cheap reads, not from the page, in one query: the lead's
    own `updated_at`, and counts and the latest times of its receipts (a
    delivery status, a gate verdict, a note, a step of its path: every
    handoff writes one), messages and calls. Counts, not only maxima, so a
    row that committed late with an earlier time still moves the version.
    """
    receipts = Receipt.objects.filter(lead=OuterRef("pk")).order_by().values("lead")
    messages = Message.objects.filter(lead=OuterRef("pk")).order_by().values("lead")
    calls = Call.objects.filter(lead=OuterRef("pk")).order_by().values("lead")
    row = (
        Lead.objects.filter(pk=lead.pk)
        .values_list(
            "updated_at",
            Subquery(receipts.annotate(n=Count("pk")).values("n")),
            Subquery(receipts.annotate(at=Max("at")).values("at")),
            Subquery(messages.annotate(n=Count("pk")).values("n")),
            Subquery(calls.annotate(n=Count("pk")).values("n")),
        )
        .first()
    )
    return _digest(row, f"{now:%Y%m%d%H%M}")


def who_choices(viewer: Viewer) -> list[tuple[str, str]]:
    choices = [("mine", "Mine"), ("unassigned", "Unassigned")]
    if viewer.leads_a_team:
        choices.append(("team", "Team"))
    return choices


def who_for(user: Any, viewer: Viewer, asked: str) -> str:
    """The `who` filter in force: what was asked if the viewer may, else their default."""
    allowed = {key for key, _ in who_choices(viewer)}
    return asked if asked in allowed else who_default(user)
