"""Housecall Pro: the adapter (agents/sync/base.py) for its public REST API (v1).

- No OAuth: each company (on the MAX plan) makes an API key in Housecall
  Pro, and an owner pastes it in our back office with the company's webhook
  signing secret (leadops/sync_views.py). Every call sends
  `Authorization: Token <api key>`. The key never expires and has no
  refresh: refused (401), the connection waits for a person to paste a new
  one (the engine's session_open).
- REST at `{HOUSECALLPRO_API_URL}`: `GET /company`, `GET|POST /customers`,
  `GET|POST /jobs`, `GET /estimates`, `GET /invoices`, one record at
  `GET /<list>/<id>`. Lists page by number (`page`, `page_size`; the answer
  says `total_pages`) and sort by `sort_by`/`sort_direction`. Over its rate
  limit it answers 429 with `Retry-After`: we wait that long (`Throttled`).
- Webhooks at `/hooks/housecall_pro/`, one URL for every company, signed
  per company: `Api-Signature` is the hex HMAC-SHA256 of
  `"<Api-Timestamp>.<raw body>"` with that company's signing secret. The
  body names the event and the company (`{"event": "job.scheduled",
  "company_id": …, "job": {…}}`): the company id only picks whose secret
  checks the signature; nothing else in the body is read before it holds,
  and the record is then read from the API as it is now (never from the
  body), so a late or repeated webhook cannot undo a newer change.

Housecall Pro's records in ours: a customer is a contact; a booking of ours
becomes one job there (no schedule: the visit's time is in its description,
which names our lead, and the shop dispatches it there), linked as the
lead's request; a job is a job and, when it has a schedule, a visit; an
estimate (its options' total and approval) an estimate; an invoice an
invoice. The v1 API lists no payments: a paid invoice is one payment of
ours, external id `<invoice id>:paid`, so however often it is read it is
received once. Money comes in cents and becomes a Decimal here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import requests
from django.conf import settings
from django.utils.dateparse import parse_datetime

from agents.sync.base import (
    CLIENT,
    ESTIMATE,
    INVOICE,
    JOB,
    PAYMENT,
    REQUEST,
    VISIT,
    Account,
    Notice,
    Page,
    PullAsk,
    PushBooking,
    Pushed,
    PushPerson,
    Refused,
    Remote,
    Session,
    SyncAdapter,
    SyncError,
    Throttled,
    TokenExpired,
)
from crm.models import Estimate, Invoice, Job, SyncConnection
from crm.services.inbound_handlers import MalformedPayload
from crm.services.sync import BOOKING

PROVIDER = "housecall_pro"
SIGNATURE_HEADER = "Api-Signature"
TIMESTAMP_HEADER = "Api-Timestamp"
TIMEOUT = (3.05, 15.0)
PAGE_SIZE = 50
CENT = Decimal("0.01")
PAID = "paid"  # the suffix of a payment's external id: `<invoice id>:paid`

# Each of our kinds: the list it is read from.
LISTS = {
    CLIENT: "customers",
    ESTIMATE: "estimates",
    JOB: "jobs",
    VISIT: "jobs",
    INVOICE: "invoices",
    PAYMENT: "invoices",
}
# Webhook events: the record's kind in ours, by the event's prefix.
EVENT_KINDS = {"customer": CLIENT, "job": JOB, "estimate": ESTIMATE, "invoice": INVOICE}
TOPICS = (
    "customer.created",
    "customer.updated",
    "customer.deleted",
    "job.created",
    "job.updated",
    "job.scheduled",
    "job.on_my_way",
    "job.started",
    "job.completed",
    "job.canceled",
    "job.deleted",
    "job.paid",
    "estimate.created",
    "estimate.updated",
    "estimate.sent",
    "estimate.option.approval_status_changed",
    "estimate.completed",
    "estimate.deleted",
    "invoice.created",
    "invoice.updated",
    "invoice.sent",
    "invoice.paid",
    "invoice.voided",
)

# Statuses, theirs -> ours.
CLOSED_JOB = {"complete", "completed", "complete_rated", "complete_unrated", "completed_unrated"}
CANCELED_JOB = {"user_canceled", "pro_canceled", "canceled"}
INVOICE_STATUS = {
    "draft": Invoice.Status.DRAFT,
    "open": Invoice.Status.ISSUED,
    "sent": Invoice.Status.ISSUED,
    "pending_payment": Invoice.Status.ISSUED,
    "past_due": Invoice.Status.ISSUED,
    "paid": Invoice.Status.PAID,
    "canceled": Invoice.Status.VOID,
    "voided": Invoice.Status.VOID,
}
APPROVED = {"approved", "pro approved", "pro_approved"}
DECLINED = {"declined", "pro declined", "pro_declined"}


def housecall_pro_signature(secret: str, timestamp: str, body: bytes) -> str:
    """The `Api-Signature` Housecall Pro sends for these bytes at this time."""
    message = timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _api() -> str:
    return str(settings.HOUSECALLPRO_API_URL).rstrip("/")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _id(value: Any) -> str:
    return str(_dict(value).get("id") or "")


def _time(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def _money(cents: Any) -> Decimal:
    """Cents (an integer, as Housecall Pro sends money) as dollars."""
    try:
        return (Decimal(str(cents or 0)) / 100).quantize(CENT)
    except (InvalidOperation, ValueError) as exc:
        raise SyncError(f"Housecall Pro sent an amount that is not a number: {cents!r}") from exc


def _digits(phone: str) -> str:
    digits = "".join(c for c in phone if c.isdigit())
    # A North American number with or without its leading 1 is one number.
    return digits[1:] if len(digits) == 11 and digits.startswith("1") else digits


def _customer_id(node: dict[str, Any]) -> str:
    return _id(node.get("customer")) or str(node.get("customer_id") or "")


def _phones(node: dict[str, Any]) -> list[str]:
    return [str(node[k]) for k in ("mobile_number", "home_number", "work_number") if node.get(k)]


def _emails(node: dict[str, Any]) -> list[str]:
    return [str(node["email"])] if node.get("email") else []


def _after(cursor: str) -> tuple[int, str]:
    """A stream's page cursor, `<next page>|<newest time read so far>`."""
    page, _, newest = cursor.partition("|")
    return (int(page) if page.isdigit() else 1), newest


class HousecallProAdapter(SyncAdapter):
    provider: ClassVar[str] = PROVIDER
    name: ClassVar[str] = "Housecall Pro"
    pulls: ClassVar[tuple[str, ...]] = (CLIENT, ESTIMATE, JOB, VISIT, INVOICE, PAYMENT)
    pushes: ClassVar[frozenset[str]] = frozenset({BOOKING})
    topics: ClassVar[tuple[str, ...]] = TOPICS
    signature_header: ClassVar[str] = SIGNATURE_HEADER
    connects_with: ClassVar[str] = "api_key"
    # A job's webhook changes its visit too (the job's schedule is the visit).
    companions: ClassVar[dict[str, tuple[str, ...]]] = {JOB: (VISIT,)}

    def account(self, session: Session) -> Account:
        company = self._get(session, "/company")
        if not _id(company):
            raise SyncError("Housecall Pro answered /company without an id")
        return Account(_id(company), str(company.get("name") or ""))

    # -- REST --------------------------------------------------------------------------------

    def _call(self, session: Session, method: str, path: str, **kw: Any) -> requests.Response:
        headers = {"Authorization": f"Token {session.access_token}", "Accept": "application/json"}
        try:
            response = session.http.request(method, f"{_api()}{path}", headers=headers, timeout=TIMEOUT, **kw)
        except requests.RequestException as exc:
            raise SyncError(f"Housecall Pro did not answer: {type(exc).__name__}") from exc
        if response.status_code == 401:
            raise TokenExpired("Housecall Pro refused the API key")
        if response.status_code == 429:
            try:
                wait = float(response.headers.get("Retry-After") or 60)
            except ValueError:
                wait = 60.0
            raise Throttled("Housecall Pro: too many requests", wait=timedelta(seconds=wait))
        if response.status_code >= 500:
            raise SyncError(f"Housecall Pro answered {response.status_code}")
        return response

    def _get(self, session: Session, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self._call(session, "GET", path, params=params)
        if response.status_code == 404:
            return {}
        return self._json(response)

    def _json(self, response: requests.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            raise Refused(f"Housecall Pro answered {response.status_code}: {response.text[:300]}")
        try:
            body = response.json()
        except ValueError as exc:
            raise SyncError(f"Housecall Pro answered {response.status_code} without JSON") from exc
        return _dict(body)

    # -- webhooks ------------------------------------------------------------------------------

    def verify(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """The signature with the secret of the company the body names. The
        company id is read only to pick that secret: an unknown company, or
        one without a secret, is a bad signature."""
        given, stamp = headers.get(SIGNATURE_HEADER, ""), headers.get(TIMESTAMP_HEADER, "")
        if not given or not stamp:
            return False
        try:
            company = str(_dict(json.loads(body)).get("company_id") or "")
        except ValueError:
            return False
        conn = SyncConnection.objects.filter(provider=PROVIDER, account_id=company).first() if company else None
        secret = conn.webhook_secret if conn is not None else ""
        expected = housecall_pro_signature(secret, stamp, body) if secret else ""
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())

    def notice(self, data: dict[str, Any]) -> Notice:
        topic, company = str(data.get("event") or ""), str(data.get("company_id") or "")
        if not topic or not company:
            raise MalformedPayload("no event or company_id")
        prefix = topic.split(".")[0]
        record = _dict(data.get(prefix))
        # The record's own time names the delivery: the same change sent again is a duplicate.
        occurred = str(record.get("updated_at") or data.get("occurred_at") or "")
        if topic not in TOPICS:
            return Notice(company, topic, "", _id(record), occurred)  # kept, ignored
        if not _id(record):
            raise MalformedPayload(f"event {topic!r} names no {prefix} id")
        if topic == "invoice.paid":
            # The payment is the paid invoice (its invoice is read first).
            return Notice(company, topic, PAYMENT, f"{_id(record)}:{PAID}", occurred)
        return Notice(company, topic, EVENT_KINDS[prefix], _id(record), occurred, deleted=topic.endswith(".deleted"))

    # -- pulling ---------------------------------------------------------------------------------

    def pull(self, session: Session, ask: PullAsk) -> Page:
        path = f"/{LISTS[ask.kind]}"
        if ask.external_id:
            record_id = ask.external_id.removesuffix(f":{PAID}") if ask.kind == PAYMENT else ask.external_id
            node = self._get(session, f"{path}/{record_id}")
            remote = self._remote(ask.kind, node) if _id(node) else None
            return Page([remote] if remote is not None else [])
        # The lists take no "changed since" filter: they are read newest
        # change first, and the stream stops at the first record no newer
        # than `since`. The cursor carries the page and the newest time read.
        page, newest = _after(ask.after)
        size = int(getattr(settings, "HOUSECALLPRO_PAGE_SIZE", PAGE_SIZE))
        params = {"page": page, "page_size": size, "sort_by": "updated_at", "sort_direction": "desc"}
        found = self._get(session, path, params)
        nodes = [n for n in found.get(LISTS[ask.kind]) or [] if isinstance(n, dict)]
        since = _time(ask.since)
        items: list[Remote] = []
        older = False
        for node in nodes:
            changed = _time(node.get("updated_at"))
            if since is not None and changed is not None and changed <= since:
                older = True
                break
            if not newest or (changed is not None and (_time(newest) is None or changed > _time(newest))):
                newest = str(node.get("updated_at") or newest)
            remote = self._remote(ask.kind, node)
            if remote is not None:
                items.append(remote)
        more = not older and page < int(found.get("total_pages") or 1)
        if more:
            return Page(items, f"{page + 1}|{newest}", True)
        return Page(items, "", False, since=newest or ask.since)

    def _remote(self, kind: str, node: dict[str, Any]) -> Remote | None:
        """Theirs in ours; None for what is not a record of `kind` (an unpaid
        invoice is no payment)."""
        version = str(node.get("updated_at") or "")
        client = _customer_id(node)
        if kind == CLIENT:
            fields: dict[str, Any] = {
                "first_name": str(node.get("first_name") or ""),
                "last_name": str(node.get("last_name") or ""),
                "emails": _emails(node),
                "phones": _phones(node),
            }
            return Remote(kind, _id(node), version, fields)
        if kind == ESTIMATE:
            options = [o for o in node.get("options") or [] if isinstance(o, dict)]
            approvals = {str(o.get("approval_status") or "").lower() for o in options}
            chosen = [o for o in options if str(o.get("approval_status") or "").lower() in APPROVED] or options[:1]
            if approvals & APPROVED:
                decided = Estimate.Status.ACCEPTED
            elif options and approvals <= DECLINED:
                decided = Estimate.Status.DECLINED
            else:
                decided = Estimate.Status.SENT
            fields = {
                "status": decided,
                "amount": _money(chosen[0].get("total_amount") if chosen else 0),
                "sent_at": _time(node.get("created_at")) or _time(version),
                "description": f"Housecall Pro estimate #{node.get('estimate_number') or ''}",
            }
            return Remote(kind, _id(node), version, fields, {CLIENT: client})
        if kind == JOB:
            status = str(node.get("work_status") or "").lower()
            stamps = _dict(node.get("work_timestamps"))
            completed = _time(stamps.get("completed_at"))
            done = completed is not None or status in CLOSED_JOB
            fields = {
                "status": Job.Status.COMPLETED if done else Job.Status.SCHEDULED,
                "scheduled_for": _time(_dict(node.get("schedule")).get("scheduled_start")),
                "completed_at": completed or (_time(version) if done else None),
                "title": str(node.get("description") or f"Housecall Pro job #{node.get('invoice_number') or ''}"),
            }
            # A job we pushed is the lead's request too: its lead is found through that link.
            refs = {CLIENT: client, REQUEST: _id(node), ESTIMATE: str(node.get("original_estimate_id") or "")}
            return Remote(kind, _id(node), version, fields, refs)
        if kind == VISIT:
            status = str(node.get("work_status") or "").lower()
            schedule = _dict(node.get("schedule"))
            stamps = _dict(node.get("work_timestamps"))
            fields = {
                "status": "held" if status in CLOSED_JOB or stamps.get("completed_at") else "scheduled",
                "starts_at": _time(schedule.get("scheduled_start")),
                "ends_at": _time(schedule.get("scheduled_end")),
                "title": str(node.get("description") or ""),
            }
            # A canceled job's visit is gone: our appointment is canceled.
            gone = status in CANCELED_JOB
            return Remote(kind, _id(node), version, fields, {CLIENT: client, JOB: _id(node)}, gone=gone)
        if kind == INVOICE:
            status = str(node.get("status") or "").lower()
            fields = {
                "status": INVOICE_STATUS.get(status, Invoice.Status.ISSUED),
                "amount": _money(node.get("amount")),
                "number": str(node.get("invoice_number") or "")[:64],
                "issued_at": _time(node.get("sent_at")) or _time(node.get("invoice_date")),
                "due_at": _time(node.get("due_at")),
            }
            return Remote(kind, _id(node), version, fields, {CLIENT: client, JOB: str(node.get("job_id") or "")})
        if kind == PAYMENT:
            if str(node.get("status") or "").lower() != PAID:
                return None
            customer = _dict(node.get("customer"))
            fields = {
                "amount": _money(node.get("amount")),
                "received_at": _time(node.get("paid_at")) or _time(version),
                "emails": _emails(customer),
                "phones": _phones(customer),
            }
            refs = {CLIENT: client, INVOICE: _id(node)}
            return Remote(kind, f"{_id(node)}:{PAID}", version, fields, refs)
        raise SyncError(f"Housecall Pro records of kind {kind!r} are not read")

    # -- pushing -----------------------------------------------------------------------------------

    def push(self, session: Session, item: PushPerson | PushBooking) -> Pushed:
        if isinstance(item, PushPerson):
            return self._customer(session, item)
        return self._job(session, item)

    def _customer(self, session: Session, person: PushPerson) -> Pushed:
        """The customer with one of the person's emails or phones, else a new one."""
        wanted = {e.lower() for e in person.emails} | {_digits(p) for p in person.phones}
        for term in (*person.emails, *person.phones):
            found = self._get(session, "/customers", {"q": term, "page": 1, "page_size": 10})
            for node in found.get("customers") or []:
                if not isinstance(node, dict):
                    continue
                theirs = {e.lower() for e in _emails(node)} | {_digits(p) for p in _phones(node)}
                if wanted & theirs:
                    return Pushed(_id(node), str(node.get("updated_at") or ""))
        payload: dict[str, Any] = {"first_name": person.first_name, "last_name": person.last_name}
        if person.emails:
            payload["email"] = person.emails[0]
        if person.phones:
            payload["mobile_number"] = person.phones[0]
        if person.address:
            payload["addresses"] = [{"street": person.address, "type": "service"}]
        return self._made(self._call(session, "POST", "/customers", json=payload), "customer")

    def _job(self, session: Session, booking: PushBooking) -> Pushed:
        """The customer's job that names our lead, else a new one."""
        page = 1
        while True:
            found = self._get(
                session, "/jobs", {"customer_id": booking.client_id, "page": page, "page_size": PAGE_SIZE}
            )
            for node in found.get("jobs") or []:
                if isinstance(node, dict) and booking.record in str(node.get("description") or ""):
                    return Pushed(_id(node), str(node.get("updated_at") or ""))
            if page >= int(found.get("total_pages") or 1):
                break
            page += 1
        payload = {
            "customer_id": booking.client_id,
            "description": booking.title[:1000],
            "tags": ["LeadOps"],
        }
        return self._made(self._call(session, "POST", "/jobs", json=payload), "job")

    def _made(self, response: requests.Response, what: str) -> Pushed:
        if response.status_code in (400, 422):
            raise Refused(f"Housecall Pro refused the {what}: {response.text[:300]}")
        record = self._json(response)
        if not _id(record):
            raise SyncError(f"Housecall Pro answered the {what} create without an id")
        return Pushed(_id(record), str(record.get("updated_at") or ""))
