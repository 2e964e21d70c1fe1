"""Reads for the setters' inbox: the conversations a user may see, one row
per lead, ordered by what needs a person first.

The order, by bucket:
0. the person waits on us and wrote something urgent (a leak, gas, no heat
   with a baby in the house, "right now"): longest waiting first;
1. the person waits, and a person's answer is held for a manager's approval;
2. the person waits on us: they wrote and no person's answer reached them
   (crm.models.Conversation, one rule in the database);
3. the first-response SLA is breached or due within `SLA_SOON`, nobody has
   reached the lead yet and no visit is booked (earliest deadline first);
4. the next action is overdue (most overdue first);
5. everything else, most recent activity first.

Sorted by intent instead (`sort=intent`), the rows come in the order of
`INTENT_ORDER` (what the person's last message asks for: complaints and
revocations first, spam last), the most recent first within each intent.

A page is a fixed number of queries however many leads and messages there
are: the page's rows (with each row's last message, first touch and the
user's unread count, computed for the page's rows only) and its count.
Visibility is `crm.selectors`' (a setter sees their own leads; owners and
managers their business's), under `message.view`: the conversation is the
sales side's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce

from crm.models import (
    BEFORE_BOOKING_STAGES,
    CLOSED_STAGES,
    ConversationRead,
    Lead,
    LeadException,
    LeadTouch,
    Message,
    Note,
    Role,
    Stage,
)
from crm.permissions import grants_for
from crm.selectors import lead_search_q, lead_visibility_q, scope_for

# A first-response deadline this close counts as due now.
SLA_SOON = timedelta(minutes=30)
PAGE_SIZE = 50
# The counts a page shows (waiting, unread) stop here ("99+"): counting every
# waiting conversation of a large business cost more than the page itself.
COUNT_CAP = 99
# Before any read mark: every message in is unread.
NEVER = datetime(1970, 1, 1, tzinfo=UTC)
OPEN_STAGES = [stage for stage in Stage.values if stage not in CLOSED_STAGES]
# The inbox's parts, in order (the row's `bucket`).
URGENT, HELD, WAITING, SLA_DUE, OVERDUE, REST = range(6)

WHO_CHOICES = ("mine", "unassigned", "team")
SORTS = ("", "intent")
# Sorted by intent: what a person must see first, first.
INTENT_ORDER = (
    "complaint",
    "revocation",
    "booking_request",
    "reschedule",
    "price_question",
    "question",
    "other",
    "wrong_number",
    "spam",
)
# A conversation's channel as a person names it: Instagram DMs come in as
# `dm` and go out as `instagram`.
CHANNEL_GROUPS = {"instagram": ("dm", "instagram"), "dm": ("dm", "instagram")}


@dataclass(frozen=True)
class InboxQuery:
    """What the user asked for; every field optional."""

    who: str = ""  # mine, unassigned, team ("" = mine for a setter, team for a leader)
    needs_reply: bool = False
    channel: str = ""
    stage: str = ""  # a stage, "open" (default) or "all"
    source: str = ""  # a provider (google_ads, meta, website…) or a source key
    q: str = ""
    intent: str = ""  # the intent of the person's last message (crm.models.INTENTS)
    sort: str = ""  # "" (who needs a person first) or "intent"


def who_default(user: Any) -> str:
    """A setter starts with their own conversations; a leader with the team's."""
    grants = grants_for(user)
    if grants.everything or any(m.role in (Role.OWNER, Role.MANAGER) for m in grants.memberships):
        return "team"
    return "mine"


def inbox_leads(user: Any, query: InboxQuery, *, region: str = "US") -> QuerySet[Lead]:
    """The leads of the user's inbox, filtered, in no order."""
    scope = scope_for(user, "message.view")
    leads = Lead.objects.filter(lead_visibility_q(scope))
    who = query.who or who_default(user)
    if who == "mine":
        leads = leads.filter(owner_id__in=scope_for(user).member_ids)
    elif who == "unassigned":
        leads = leads.filter(Q(owner__isnull=True) | Q(exceptions__contains=[LeadException.NO_ELIGIBLE_OWNER]))
    if query.needs_reply:
        leads = leads.filter(conversation__awaiting_since__isnull=False)
    if query.channel:
        leads = leads.filter(conversation__last_channel__in=CHANNEL_GROUPS.get(query.channel, (query.channel,)))
    if query.stage == "all":
        pass
    elif query.stage:
        leads = leads.filter(stage=query.stage)
    else:
        # Open leads, and a closed one whose person wrote back and waits.
        leads = leads.filter(~Q(stage__in=CLOSED_STAGES) | Q(conversation__awaiting_since__isnull=False))
    if query.source:
        touched = LeadTouch.objects.filter(Q(provider=query.source) | Q(source__key=query.source))
        leads = leads.filter(pk__in=touched.values("lead_id"))
    if query.q.strip():
        leads = leads.filter(lead_search_q(query.q, region))
    if query.intent:
        leads = leads.filter(conversation__last_intent=query.intent)
    return leads


def _by_intent() -> list[tuple[Q, str, bool]]:
    """The order by intent as parts (see `_buckets`): one per intent, then
    the conversations whose person has said nothing we read yet."""
    recent = "conversation__last_activity_at"
    return [
        *((Q(conversation__last_intent=intent), recent, False) for intent in INTENT_ORDER),
        (~Q(conversation__last_intent__in=INTENT_ORDER), recent, False),
    ]


def _parts(now: datetime) -> list[Q]:
    """The inbox's parts as disjoint conditions, in order (URGENT … REST)."""
    urgent = Q(conversation__urgent_since__isnull=False)
    held = Q(conversation__held_since__isnull=False)
    waiting = Q(conversation__awaiting_since__isnull=False)
    sla = Q(first_response_at__isnull=True, sla_due_at__lt=now + SLA_SOON, stage__in=BEFORE_BOOKING_STAGES)
    overdue = Q(next_action_due_at__lt=now, stage__in=OPEN_STAGES)
    # Urgent and held are kept only while the person waits (the rule sets
    # them so), so each part is disjoint from the ones before it.
    return [
        urgent,
        ~urgent & held,
        ~urgent & ~held & waiting,
        ~waiting & sla,
        ~waiting & ~sla & overdue,
        ~waiting & ~sla & ~overdue,
    ]


def _buckets(now: datetime) -> list[tuple[Q, str, bool]]:
    """The inbox's order as disjoint parts, each (rows, the time it is
    ordered by, ascending?): every part reads along an index (the
    conversation's urgent, held and waiting partial indexes, the lead's
    first-response and next-action partial indexes, the conversation's last
    activity) and stops at the rows a page needs, where one CASE over every
    lead sorted them all (a third of a second at 100,000 leads)."""
    urgent, held, waiting, sla, overdue, rest = _parts(now)
    return [
        (urgent, "conversation__urgent_since", True),
        (held, "conversation__awaiting_since", True),
        (waiting, "conversation__awaiting_since", True),
        (sla, "sla_due_at", True),
        (overdue, "next_action_due_at", True),
        # The rest by their last activity (the newest message, else the
        # lead's arrival), newest first.
        (rest, "conversation__last_activity_at", False),
    ]


def inbox_page(user: Any, query: InboxQuery, *, now: datetime, page: int = 1, region: str = "US") -> InboxPage:
    """One page of the inbox with what each row shows.

    The page's lead ids come part by part of the inbox's order (`_buckets`),
    each part read along its index and cut where the page ends, and a part
    is read only while the page is not full: a page is a few short reads
    (at most one per part) however many leads and messages there are,
    never a sort of them all. Then only those leads are read with their contact, owner, last
    message, first touch and the user's unread count. The header's count is
    of the conversations waiting for a person (capped at `COUNT_CAP`)."""
    page = max(page, 1)
    leads = inbox_leads(user, query, region=region)
    start = (page - 1) * PAGE_SIZE
    # One row past the page says whether there is a next one.
    reach = start + PAGE_SIZE + 1
    ids: list[int] = []
    for where, field, ascending in _by_intent() if query.sort == "intent" else _buckets(now):
        order = F(field).asc() if ascending else F(field).desc()
        ids += leads.filter(where).order_by(order, "-pk").values_list("pk", flat=True)[: reach - len(ids)]
        if len(ids) >= reach:
            break
    has_next, ids = len(ids) > start + PAGE_SIZE, ids[start : start + PAGE_SIZE]
    waiting = leads.filter(conversation__awaiting_since__isnull=False).order_by()[: COUNT_CAP + 1].count()
    found = (
        Lead.objects.filter(pk__in=ids)
        .select_related(
            "contact", "owner__user", "conversation__last_message", "conversation__missed_answer", "business"
        )
        .annotate(bucket=_bucket(now), read_at=Coalesce(_read_mark(user), Value(NEVER)))
        .annotate(
            unread=_unread(user),
            last_intent=F("conversation__last_intent"),
            first_channel=Subquery(_first_touch().values("channel")[:1]),
            first_provider=Subquery(_first_touch().values("provider")[:1]),
            first_source=Subquery(_first_touch().values("source__key")[:1]),
        )
        .in_bulk()
    )
    rows = [found[pk] for pk in ids if pk in found]
    return InboxPage(
        rows=rows,
        waiting=min(waiting, COUNT_CAP),
        more_waiting=waiting > COUNT_CAP,
        page=page,
        page_size=PAGE_SIZE,
        has_next=has_next,
    )


def _bucket(now: datetime) -> Case:
    """The part a shown row is in (its "why it is here")."""
    parts = _parts(now)
    return Case(
        *(When(part, then=Value(number)) for number, part in enumerate(parts[:-1])),
        default=Value(REST),
        output_field=IntegerField(),
    )


def _first_touch() -> QuerySet[LeadTouch]:
    return LeadTouch.objects.filter(lead=OuterRef("pk")).order_by("received_at", "pk")


def _read_mark(user: Any, lead: str = "pk") -> Subquery:
    """How far `user` has read the lead's conversation (over Lead, or over a
    row naming its lead in `lead`)."""
    return Subquery(ConversationRead.objects.filter(user=user, lead=OuterRef(lead)).values("read_at")[:1])


def _unread(user: Any) -> Any:
    """Messages in after the lead's `read_at` annotation, and the decisions
    addressed to `user` since then (a held reply of theirs rejected…)."""
    unread = (
        Message.objects.filter(lead=OuterRef("pk"), direction="in", created_at__gt=OuterRef("read_at"))
        .order_by()
        .values("lead")
        .annotate(n=Count("pk"))
        .values("n")
    )
    decisions = (
        _decisions_for(user)
        .filter(lead=OuterRef("pk"), created_at__gt=OuterRef("read_at"))
        .order_by()
        .values("lead")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(unread, output_field=IntegerField()), Value(0)) + Coalesce(
        Subquery(decisions, output_field=IntegerField()), Value(0)
    )


def _decisions_for(user: Any) -> QuerySet[Note]:
    return Note.objects.filter(kind=Note.Kind.DECISION, addressee_id=user.pk)


@dataclass(frozen=True)
class InboxPage:
    # Leads annotated with bucket, unread, last_intent, first_channel,
    # first_provider and first_source (the checker cannot follow annotations through in_bulk).
    rows: list[Any]
    waiting: int  # conversations waiting for a person, at most COUNT_CAP
    more_waiting: bool  # more than COUNT_CAP
    page: int
    page_size: int
    has_next: bool


def unread_conversations(user: Any) -> int:
    """The top bar's count: the user's own conversations with a message in
    they have not read (and, for a leader, the unassigned ones too), and any
    conversation they may see with a decision addressed to them since they
    last read it, up to one past `COUNT_CAP` (the badge says "99+")."""
    grants = grants_for(user)
    mine = Q(owner_id__in=[m.member_id for m in grants.memberships])
    leading = [m.business_id for m in grants.memberships if m.role in (Role.OWNER, Role.MANAGER)]
    if leading:
        mine |= Q(business_id__in=leading, owner__isnull=True)
    if not grants.memberships:
        return 0
    unread = (
        Lead.objects.filter(mine, conversation__last_inbound_at__isnull=False)
        .annotate(read_at=Coalesce(_read_mark(user), Value(NEVER)))
        .filter(conversation__last_inbound_at__gt=F("read_at"))
        .order_by()
    )
    # Two short reads along their own indexes, joined here: one OR in SQL
    # would make the planner walk every lead of the business.
    decided = (
        _decisions_for(user)
        .filter(lead_visibility_q(scope_for(user, "message.view"), "lead"))
        .annotate(read_at=Coalesce(_read_mark(user, "lead_id"), Value(NEVER)))
        .filter(created_at__gt=F("read_at"))
        .order_by()
        .values_list("lead_id", flat=True)
        .distinct()
    )
    leads = set(unread.values_list("pk", flat=True)[: COUNT_CAP + 1]) | set(decided[: COUNT_CAP + 1])
    return min(len(leads), COUNT_CAP + 1)
