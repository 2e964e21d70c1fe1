"""The message sweep: settle what a dispatch left open, fail visibly what
cannot be settled. Its own periodic job (`leadops.messages_sweep`), a bounded
batch per run.

A worker can stop anywhere between its claim and its finish (killed, timed
out, a deploy), and an enqueue can be lost after commit. By age:

- `sending` for longer than MESSAGE_SENDING_STALE_SECONDS: its worker is gone
  and the outcome is unknown, so it becomes `unknown` (never `queued`);
- `unknown` (a minute after its claim, so the provider has surely recorded a
  send it took): asked of the provider — by the provider's id when the worker
  saved one, else by recipient and sender, keeping what the provider created
  within the claim's window whose body matches ours after the provider's
  normalization (`provider_body_key`). Found → the provider's status and id;
  not found → `queued` again; the provider unreachable → one reconcile
  attempt spent;
- `unknown` Instagram DM: Meta has no lookup by recipient and text, and a DM
  sent twice lands twice in the person's inbox, so it is never sent again.
  With Meta's id saved (Meta answered, the worker stopped before finishing)
  it went out: `sent`. Without one, each run spends a reconcile attempt
  waiting for its echo (agents.outbound.instagram settles it `sent` when the
  echo arrives); past the cap it is given up for a person to look at the
  Instagram thread;
- `unknown` marketplace reply (Thumbtack, Yelp): with the marketplace's id
  saved it went out; otherwise the thread is read for our text posted since
  the claim (agents.outbound.marketplace): there → `sent`; not there →
  `queued` again; the thread unreadable → one reconcile attempt spent;
- `queued` for longer than MESSAGE_QUEUED_STALE_SECONDS with no dispatch task
  waiting → enqueued again (a duplicate would be harmless: the claim lets one
  worker through).

A message has MAX_DISPATCH_ATTEMPTS claims and MAX_RECONCILE_ATTEMPTS
unsettled reconciliations (database constraints cap both). Past either —
or at once for an email, whose fate no mail server can be asked — it is
given up: `failed` with the reason, and an exception item for the manager.
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from twilio.base.exceptions import TwilioException
from twilio.http import HttpClient
from twilio.rest import Client

from agents.outbound.dispatch import (
    ACTOR,
    call_row_ensure,
    dispatch_enqueue,
    message_account,
    message_give_up,
)
from agents.outbound.marketplace import MARKETPLACE_CHANNELS, ThreadLookupError, marketplace_find
from agents.outbound.twilio_accounts import TwilioAccount, twilio_client
from crm.models import Message
from crm.services.receipts import receipt_write

log = logging.getLogger(__name__)
BATCH = 100
# The provider records a send it took before it answers; a minute after the
# claim, a send it does not list is one it never took.
UNKNOWN_SETTLE = timedelta(minutes=1)
# What the provider created for a claim is created within this of it (the
# HTTP call's own timeout is ten seconds).
MATCH_WINDOW = timedelta(minutes=5)
LIST_LIMIT = 50
DISPATCH_FUNC = "agents.tasks.message_dispatch"

# Twilio's Smart Encoding (on by default for Messaging Services) stores and
# lists a text with Unicode look-alikes replaced by GSM-7 characters; NFKC
# covers the widths, spaces and ellipses, this the quotes and dashes.
_LOOKALIKES = str.maketrans(
    {
        **dict.fromkeys("\u00ab\u00bb\u201c\u201d\u201e\u201f\u2033\u2036\u02ba\u02ee\u275d\u275e\u301d\u301e", '"'),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2035\u02b9\u02bb\u02bc\u02bd\u02c8\u02ca\u02cb\u00b4`", "'"),
        **dict.fromkeys("\u275b\u275c", "'"),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2043\ufe58\ufe63", "-"),
        **dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff", ""),
    }
)
TRIAL_PREFIX = "Sent from your Twilio trial account - "


def provider_body_key(body: str) -> str:
    """A text as the provider may hand it back, reduced to what survives its
    rewriting: look-alike characters folded (Smart Encoding), whitespace runs
    collapsed and trimmed (line endings, trailing spaces), a trial account's
    prefix dropped. Equal keys: the same text."""
    text = unicodedata.normalize("NFKC", body).translate(_LOOKALIKES)
    return " ".join(text.split()).removeprefix(TRIAL_PREFIX.strip()).strip()


@dataclass
class Sweep:
    stalled: int = 0  # sending → unknown
    found: int = 0  # settled by the provider's record
    requeued: int = 0  # the provider never took it: queued again
    unreachable: int = 0  # the provider could not be asked this run
    reenqueued: int = 0  # queued with its enqueue lost: enqueued again
    gave_up: int = 0  # failed, with an exception item

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _older(qs: QuerySet[Message], field: str, cut: datetime) -> QuerySet[Message]:
    # Rows from before the sweep's clocks existed fall back to their creation.
    return qs.filter(Q(**{f"{field}__lt": cut}) | Q(**{f"{field}__isnull": True, "created_at__lt": cut}))


def messages_reconcile(
    *, now: datetime | None = None, batch: int = BATCH, http_client: HttpClient | None = None
) -> dict[str, int]:
    """One bounded sweep (at most `batch` rows of each kind); returns its
    counts. Each row is settled by its own conditional update and
    transaction, so an overlapping run or a late worker changes nothing
    twice; provider calls run outside any transaction."""
    now = now or timezone.now()
    run = Sweep()
    outbound = Message.objects.filter(direction="out")
    stale_sending = _older(outbound.filter(status=Message.Status.SENDING), "claimed_at", now - _seconds("SENDING"))
    for message in stale_sending.select_related("business", "lead").order_by("created_at")[:batch]:
        run.stalled += _stall(message)
    unknown = _older(outbound.filter(status=Message.Status.UNKNOWN), "claimed_at", now - UNKNOWN_SETTLE)
    clients: dict[TwilioAccount, Client] = {}
    for message in unknown.select_related("business", "lead").order_by("claimed_at", "created_at")[:batch]:
        _settle(message, run, now=now, clients=clients, http_client=http_client)
    stale_queued = _older(outbound.filter(status=Message.Status.QUEUED), "queued_at", now - _seconds("QUEUED"))
    candidates = list(stale_queued.select_related("business", "lead").order_by("created_at")[:batch])
    waiting = _dispatch_tasks_waiting() if candidates else set()
    for message in candidates:
        if waiting is not None and message.pk in waiting:
            continue  # behind a backlog, not lost
        if message.attempts >= Message.MAX_DISPATCH_ATTEMPTS:
            run.gave_up += message_give_up(
                message, from_status=Message.Status.QUEUED, reason=f"all {message.attempts} dispatch attempts spent"
            )
        elif Message.objects.filter(pk=message.pk, status=Message.Status.QUEUED, queued_at=message.queued_at).update(
            queued_at=now
        ):
            # queued_at moves on, so the next run waits a whole bound again.
            dispatch_enqueue(message.pk)
            run.reenqueued += 1
    return run.as_dict()


def _seconds(which: str) -> timedelta:
    return timedelta(seconds=int(getattr(settings, f"MESSAGE_{which}_STALE_SECONDS")))


def _stall(message: Message) -> int:
    with transaction.atomic():
        if not Message.objects.filter(
            pk=message.pk, status=Message.Status.SENDING, claimed_at=message.claimed_at
        ).update(status=Message.Status.UNKNOWN):
            return 0  # its worker finished after all
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=ACTOR,
            action="message.stalled",
            reason="the worker stopped mid-send: the outcome is unknown until reconciled",
            before={"status": Message.Status.SENDING},
            after={"status": Message.Status.UNKNOWN, "sid": message.provider_sid},
        )
    message.status = Message.Status.UNKNOWN
    return 1


def _settle(
    message: Message, run: Sweep, *, now: datetime, clients: dict[TwilioAccount, Client], http_client: HttpClient | None
) -> None:
    if message.channel == "email":
        run.gave_up += message_give_up(
            message,
            from_status=Message.Status.UNKNOWN,
            reason="the mail server's answer was lost and no mail server can be asked whether it went out",
        )
        return
    if settings.SEND_MODE != "live":
        return  # nothing to ask: dry-run never hands anything to a provider
    if message.channel == "instagram":
        _settle_instagram(message, run)
        return
    if message.channel in MARKETPLACE_CHANNELS:
        _settle_thread(message, run, now=now)
        return
    account = message_account(message)
    if account not in clients:
        clients[account] = twilio_client(account, http_client)
    try:
        record = _provider_record(message, clients[account])
    except (TwilioException, requests.RequestException) as exc:
        log.warning("reconcile %s: %s", message.public_id, exc)
        _unreachable(message, run, f"{type(exc).__name__}: {exc}"[:200])
        return
    if record is None:
        _not_found(message, run, now=now)
    else:
        _found(message, run, record)


def _settle_instagram(message: Message, run: Sweep) -> None:
    if message.provider_sid:
        # Meta answered with its id before the worker stopped: it took the DM.
        with transaction.atomic():
            if not Message.objects.filter(pk=message.pk, status=Message.Status.UNKNOWN).update(
                status=Message.Status.SENT, sent_at=timezone.now()
            ):
                return
            receipt_write(
                business=message.business,
                lead=message.lead,
                subject=message.public_id,
                actor=ACTOR,
                action="message.reconciled_sent",
                reason="Meta answered with its message id: the DM went out",
                before={"status": Message.Status.UNKNOWN},
                after={"status": Message.Status.SENT, "sid": message.provider_sid},
            )
        run.found += 1
        return
    spent = message.reconcile_attempts + 1
    if spent >= Message.MAX_RECONCILE_ATTEMPTS:
        run.gave_up += message_give_up(
            message,
            from_status=Message.Status.UNKNOWN,
            reason=(
                f"Meta's answer to this DM was lost and no echo of it arrived in {spent} sweeps; Instagram "
                "cannot be asked, so it is not sent again: look in the Instagram thread, and send it by hand "
                "if it is not there"
            ),
        )
        return
    Message.objects.filter(
        pk=message.pk, status=Message.Status.UNKNOWN, reconcile_attempts__lt=Message.MAX_RECONCILE_ATTEMPTS - 1
    ).update(reconcile_attempts=F("reconcile_attempts") + 1)
    run.unreachable += 1


def _settle_thread(message: Message, run: Sweep, *, now: datetime) -> None:
    if message.provider_sid:
        found: str | None = message.provider_sid
    else:
        try:
            found = marketplace_find(message)
        except ThreadLookupError as exc:
            log.warning("reconcile %s: %s", message.public_id, exc)
            _unreachable(message, run, str(exc)[:200])
            return
        if found is None:
            _not_found(message, run, now=now)
            return
        found = f"{message.channel}:{found}" if found else None
    with transaction.atomic():
        changes: dict[str, Any] = {"status": Message.Status.SENT, "sent_at": timezone.now()}
        if found and not message.provider_sid:
            changes["provider_sid"] = found
        if not Message.objects.filter(pk=message.pk, status=Message.Status.UNKNOWN).update(**changes):
            return
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=ACTOR,
            action="message.reconciled_sent",
            reason=f"the {message.channel} thread holds it: it went out",
            before={"status": Message.Status.UNKNOWN},
            after={"status": Message.Status.SENT, "sid": found},
        )
    run.found += 1


def _window(message: Message) -> tuple[datetime, datetime | None]:
    anchor = message.claimed_at or message.created_at
    # Without a claim time (a row from before it was kept) the send may have
    # been tried any time since creation.
    return anchor - timedelta(minutes=1), (anchor + MATCH_WINDOW) if message.claimed_at else None


def _provider_record(message: Message, client: Client) -> Any | None:
    """The provider's record of this message, or None when it has none."""
    if message.provider_sid:
        # The provider answered and the worker saved its id: ask for exactly that.
        if message.channel == "voice":
            return client.calls(message.provider_sid).fetch()
        return client.messages(message.provider_sid).fetch()
    since, until = _window(message)
    held = set(
        Message.objects.filter(provider_sid__isnull=False, to=message.to, created_at__gte=since - MATCH_WINDOW)
        .exclude(pk=message.pk)
        .values_list("provider_sid", flat=True)
    )
    sender = message.from_number
    listing: dict[str, Any] = {"to": message.to, "limit": LIST_LIMIT}
    if not sender.startswith("MG"):
        listing["from_"] = sender
    # No DateSent filter: DateSent stays empty while the provider still queues
    # a text (a Messaging Service may hold it up to its validity period), and
    # those are exactly the sends in flight. The window is applied here.
    if message.channel == "voice":
        candidates = [c for c in client.calls.list(**listing) if str(c.direction or "").startswith("outbound")]
    else:
        key = provider_body_key(message.body)
        candidates = [
            m
            for m in client.messages.list(**listing)
            if str(m.direction or "outbound").startswith("outbound")
            and (not sender.startswith("MG") or m.messaging_service_sid in (None, sender))
            and provider_body_key(m.body or "") == key
        ]
    matches = [
        c
        for c in candidates
        if c.sid not in held
        and (c.date_created is None or (c.date_created >= since and (until is None or c.date_created <= until)))
    ]
    # The earliest unclaimed one: two of our identical texts in one window
    # take the provider's two in order, each held once (provider_sid is unique).
    return min(matches, key=lambda c: c.date_created or since) if matches else None


PROVIDER_OUTCOME = {
    "delivered": Message.Status.DELIVERED,
    "read": Message.Status.DELIVERED,
    "undelivered": Message.Status.UNDELIVERED,
    "failed": Message.Status.FAILED,
    "canceled": Message.Status.FAILED,
    "busy": Message.Status.FAILED,
    "no-answer": Message.Status.FAILED,
}


def _found(message: Message, run: Sweep, record: Any) -> None:
    status = PROVIDER_OUTCOME.get(str(record.status or ""), Message.Status.SENT)  # queued, sending, sent: accepted
    error = str(getattr(record, "error_code", None) or "")
    with transaction.atomic():
        changes: dict[str, Any] = {"status": status, "provider_sid": record.sid, "error_code": error[:32]}
        if status != Message.Status.FAILED:
            changes["sent_at"] = timezone.now()
        if not Message.objects.filter(pk=message.pk, status=Message.Status.UNKNOWN).update(**changes):
            return
        if message.channel == "voice":
            call_row_ensure(message, record.sid)
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=ACTOR,
            action="message.reconciled_sent",
            reason="the provider's record settles an unknown outcome",
            before={"status": Message.Status.UNKNOWN},
            after={"status": status, "sid": record.sid, "provider_status": record.status},
        )
    run.found += 1


def _not_found(message: Message, run: Sweep, *, now: datetime) -> None:
    if message.provider_sid:
        # It has the provider's id, so the provider took it: never send it again.
        _unreachable(message, run, f"the provider has no record of {message.provider_sid}")
        return
    if message.attempts >= Message.MAX_DISPATCH_ATTEMPTS:
        run.gave_up += message_give_up(
            message,
            from_status=Message.Status.UNKNOWN,
            reason=f"the provider has no record of it after all {message.attempts} dispatch attempts",
        )
        return
    with transaction.atomic():
        if not Message.objects.filter(pk=message.pk, status=Message.Status.UNKNOWN).update(
            status=Message.Status.QUEUED, queued_at=now
        ):
            return
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=ACTOR,
            action="message.reconciled_requeued",
            reason="the provider has no record of it: it is sent once more",
            before={"status": Message.Status.UNKNOWN},
            after={"status": Message.Status.QUEUED, "attempts": message.attempts},
        )
        dispatch_enqueue(message.pk)
    run.requeued += 1


def _unreachable(message: Message, run: Sweep, error: str) -> None:
    spent = message.reconcile_attempts + 1
    if spent >= Message.MAX_RECONCILE_ATTEMPTS:
        run.gave_up += message_give_up(
            message,
            from_status=Message.Status.UNKNOWN,
            reason=f"its outcome could not be settled in {spent} tries ({error}); check the provider's log",
        )
        return
    Message.objects.filter(
        pk=message.pk, status=Message.Status.UNKNOWN, reconcile_attempts__lt=Message.MAX_RECONCILE_ATTEMPTS - 1
    ).update(reconcile_attempts=F("reconcile_attempts") + 1, error_code=error[:32])
    run.unreachable += 1


def _dispatch_tasks_waiting() -> set[int] | None:
    """The ids of messages with a dispatch task in the queue, or None when
    the broker cannot be looked into (then every stale one is enqueued again,
    which the claim makes harmless)."""
    from django_q.brokers import get_broker
    from django_q.brokers.orm import ORM
    from django_q.models import OrmQ

    broker = get_broker()
    if not isinstance(broker, ORM):
        return None
    ids: set[int] = set()
    # A pulled (locked) task is running or will be handed out again: it counts.
    for queued in OrmQ.objects.filter(key=broker.list_key).only("payload").iterator(chunk_size=500):
        task = queued.task
        if task.get("func") == DISPATCH_FUNC and task.get("args"):
            ids.add(int(task["args"][0]))
    return ids
