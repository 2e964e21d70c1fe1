"""Jobber: the adapter (agents/sync/base.py) for Jobber's GraphQL API.

- OAuth, the authorization-code flow: the person is sent to
  `{JOBBER_AUTH_URL}/api/oauth/authorize`; the code comes back to our
  callback and is exchanged at `{JOBBER_API_URL}/api/oauth/token`, as are
  refresh tokens. Refresh tokens rotate: each use returns a new one and the
  old one dies, so the engine keeps the newest and never refreshes twice at
  once. An access token lives an hour (the JWT's `exp` says so).
- GraphQL at `{JOBBER_API_URL}/api/graphql`, JSON only, with
  `X-JOBBER-GRAPHQL-VERSION`. Every query has a cost; an account's budget
  refills at `restoreRate` points a second. Over budget Jobber answers
  `THROTTLED` in `errors[].extensions.code`, with
  `extensions.cost.throttleStatus` {maximumAvailable, currentlyAvailable,
  restoreRate}: we wait until the query's cost is restored (`Throttled`),
  never sleeping in a request or a worker.
- Webhooks at `/hooks/jobber/`: app-wide, signed `X-Jobber-Hmac-SHA256`
  (base64 HMAC-SHA256 of the raw body with the app's client secret), the
  body `{"data": {"webHookEvent": {topic, appId, accountId, itemId,
  occurredAt}}}`: only ids, so the record is pulled. Delivered at least
  once, in no promised order, and to be answered within a second.

Jobber's records in ours: a client is a contact, a request a lead (ours are
pushed, one per lead), a quote an estimate, a job a job, a visit an
appointment, an invoice an invoice, a payment record a payment. Money comes
as a float in the account's currency and becomes a Decimal here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.utils import timezone
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
    AuthRefused,
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
    Tokens,
)
from crm.models import Estimate, Invoice, Job
from crm.services.inbound_handlers import MalformedPayload
from crm.services.sync import BOOKING

SIGNATURE_HEADER = "X-Jobber-Hmac-SHA256"
TIMEOUT = (3.05, 15.0)
PAGE_SIZE = 50
# Without an `exp` to read, an access token is taken to live this long.
TOKEN_LIFETIME = timedelta(minutes=60)
CENT = Decimal("0.01")

# Webhook topics: the record's kind in ours, by the topic's prefix.
TOPIC_KINDS = {
    "CLIENT": CLIENT,
    "REQUEST": REQUEST,
    "QUOTE": ESTIMATE,
    "JOB": JOB,
    "VISIT": VISIT,
    "INVOICE": INVOICE,
    "PAYMENT": PAYMENT,
}
DISCONNECT_TOPIC = "APP_DISCONNECT"
TOPICS = (
    *(f"{prefix}_{verb}" for prefix in TOPIC_KINDS for verb in ("CREATE", "UPDATE", "DESTROY")),
    "QUOTE_SENT",
    "QUOTE_APPROVED",
    "JOB_CLOSED",
    "VISIT_COMPLETE",
    DISCONNECT_TOPIC,
)

# Statuses, theirs -> ours (lower-cased: the schema's enums and its docs
# spell them in both cases).
QUOTE_STATUS = {
    "draft": Estimate.Status.DRAFT,
    "awaiting_response": Estimate.Status.SENT,
    "changes_requested": Estimate.Status.SENT,
    "approved": Estimate.Status.ACCEPTED,
    "converted": Estimate.Status.ACCEPTED,
    "archived": Estimate.Status.DECLINED,
}
CLOSED_JOB = {"requires_invoicing", "archived"}
INVOICE_STATUS = {
    "draft": Invoice.Status.DRAFT,
    "awaiting_payment": Invoice.Status.ISSUED,
    "past_due": Invoice.Status.ISSUED,
    "paid": Invoice.Status.PAID,
    "bad_debt": Invoice.Status.VOID,
}

ACCOUNT_QUERY = "query Account { account { id name } }"
CLIENT_FIELDS = "id firstName lastName updatedAt emails { address } phones { number }"
CLIENTS_QUERY = f"""query Clients($search: String, $first: Int, $after: String) {{
  clients(searchTerm: $search, first: $first, after: $after) {{
    nodes {{ {CLIENT_FIELDS} }}
    pageInfo {{ hasNextPage endCursor }}
  }}
}}"""
CLIENT_CREATE = """mutation ClientCreate($input: ClientCreateInput!) {
  clientCreate(input: $input) { client { id updatedAt } userErrors { message path } }
}"""
CLIENT_REQUESTS = """query ClientRequests($id: EncodedId!) {
  client(id: $id) { id requests(first: 50) { nodes { id title updatedAt } } }
}"""
REQUEST_CREATE = """mutation RequestCreate($input: RequestCreateInput!) {
  requestCreate(input: $input) { request { id updatedAt } userErrors { message path } }
}"""
# Per kind: (the one-record field, the list field, the node's fields).
RECORDS: dict[str, tuple[str, str, str]] = {
    CLIENT: ("client", "clients", CLIENT_FIELDS),
    ESTIMATE: (
        "quote",
        "quotes",
        "id quoteNumber title quoteStatus updatedAt sentAt amounts { total } client { id } request { id }",
    ),
    JOB: (
        "job",
        "jobs",
        "id jobNumber title jobStatus startAt completedAt updatedAt total client { id } request { id } quote { id }",
    ),
    VISIT: (
        "visit",
        "visits",
        "id title startAt endAt completedAt visitStatus updatedAt job { id } client { id }",
    ),
    INVOICE: (
        "invoice",
        "invoices",
        "id invoiceNumber subject invoiceStatus issuedDate dueDate updatedAt amounts { total } "
        "client { id } jobs { nodes { id } }",
    ),
    PAYMENT: (
        "paymentRecord",
        "paymentRecords",
        "id amount entryDate updatedAt invoice { id } client { id emails { address } phones { number } }",
    ),
}


def jobber_signature(secret: str, body: bytes) -> str:
    """The `X-Jobber-Hmac-SHA256` Jobber sends for these bytes."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode("ascii")


def _api() -> str:
    return str(settings.JOBBER_API_URL).rstrip("/")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return None
    if parsed is None:
        return None
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)


def _money(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SyncError(f"Jobber sent {value!r} as an amount")
    try:
        amount = Decimal(str(value)).quantize(CENT)
    except InvalidOperation as exc:
        raise SyncError(f"Jobber sent {value!r} as an amount") from exc
    return amount


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _id(node: Any) -> str:
    return str(node.get("id") or "") if isinstance(node, dict) else ""


def _texts(nodes: Any, key: str) -> tuple[str, ...]:
    return tuple(str(n[key]) for n in nodes or [] if isinstance(n, dict) and n.get(key))


def _token_expiry(access_token: str, expires_in: Any) -> datetime:
    """When an access token dies: `expires_in` when Jobber gives it, else
    the JWT's own `exp` (read, not verified: it is ours to use, not to trust)."""
    now = timezone.now()
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        return now + timedelta(seconds=float(expires_in))
    try:
        payload = access_token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return datetime.fromtimestamp(int(claims["exp"]), tz=UTC)
    except (IndexError, ValueError, KeyError, TypeError, binascii.Error):
        return now + TOKEN_LIFETIME


def _throttle_wait(cost: dict[str, Any]) -> timedelta:
    """How long until the budget holds what the refused query asked for."""
    status = _dict(cost.get("throttleStatus"))
    available = float(status.get("currentlyAvailable") or 0)
    maximum = float(status.get("maximumAvailable") or 0)
    rate = float(status.get("restoreRate") or 0) or 1.0
    wanted = float(cost.get("requestedQueryCost") or 0) or max(maximum / 10, 1.0)
    return timedelta(seconds=max((min(wanted, maximum or wanted) - available) / rate, 1.0))


class JobberAdapter(SyncAdapter):
    provider: ClassVar[str] = "jobber"
    name: ClassVar[str] = "Jobber"
    pulls: ClassVar[tuple[str, ...]] = (CLIENT, ESTIMATE, JOB, VISIT, INVOICE, PAYMENT)
    pushes: ClassVar[frozenset[str]] = frozenset({BOOKING})
    topics: ClassVar[tuple[str, ...]] = TOPICS
    signature_header: ClassVar[str] = SIGNATURE_HEADER

    # -- OAuth -----------------------------------------------------------------------------

    def authorize_url(self, *, redirect_uri: str, state: str) -> str:
        query = urlencode(
            {
                "response_type": "code",
                "client_id": settings.JOBBER_CLIENT_ID,
                "redirect_uri": redirect_uri,
                "state": state,
            }
        )
        return f"{str(settings.JOBBER_AUTH_URL).rstrip('/')}/api/oauth/authorize?{query}"

    def tokens_exchange(self, *, code: str, redirect_uri: str) -> Tokens:
        return self._token({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri})

    def tokens_refresh(self, refresh_token: str) -> Tokens:
        return self._token({"grant_type": "refresh_token", "refresh_token": refresh_token})

    def _token(self, form: dict[str, str]) -> Tokens:
        form = {"client_id": settings.JOBBER_CLIENT_ID, "client_secret": settings.JOBBER_CLIENT_SECRET, **form}
        try:
            response = requests.post(f"{_api()}/api/oauth/token", data=form, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise SyncError(f"Jobber's token endpoint did not answer: {type(exc).__name__}") from exc
        if response.status_code in (400, 401, 403):
            # invalid_grant and its kin: the code or refresh token is no good.
            raise AuthRefused(f"Jobber refused the {form['grant_type'].replace('_', ' ')} ({_oauth_error(response)})")
        if response.status_code >= 300:
            raise SyncError(f"Jobber's token endpoint answered {response.status_code}")
        try:
            body = response.json()
            access, refresh = str(body["access_token"]), str(body.get("refresh_token") or form.get("refresh_token", ""))
        except (ValueError, KeyError, TypeError) as exc:
            raise SyncError("Jobber's token endpoint answered without an access token") from exc
        return Tokens(access, refresh, _token_expiry(access, body.get("expires_in")))

    def account(self, session: Session) -> Account:
        account = self._graphql(session, ACCOUNT_QUERY, {}).get("account") or {}
        if not _id(account):
            raise SyncError("Jobber answered the account query without an account id")
        return Account(_id(account), str(account.get("name") or ""))

    # -- GraphQL -----------------------------------------------------------------------------

    def _graphql(self, session: Session, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        headers = {
            "Authorization": f"Bearer {session.access_token}",
            "X-JOBBER-GRAPHQL-VERSION": settings.JOBBER_GRAPHQL_VERSION,
            "Content-Type": "application/json",
        }
        started = time.monotonic()
        try:
            response = session.http.post(
                f"{_api()}/api/graphql", json={"query": query, "variables": variables}, headers=headers, timeout=TIMEOUT
            )
        except requests.RequestException as exc:
            raise SyncError(f"Jobber did not answer: {type(exc).__name__}") from exc
        if response.status_code == 401:
            raise TokenExpired("Jobber refused the access token")
        if response.status_code == 429:
            # The request-count guard (2,500 per 5 minutes) rather than the cost budget.
            wait = float(response.headers.get("Retry-After") or 30)
            raise Throttled("Jobber: too many requests", wait=timedelta(seconds=wait))
        if response.status_code >= 500:
            raise SyncError(f"Jobber answered {response.status_code} after {time.monotonic() - started:.1f} s")
        try:
            body = response.json()
        except ValueError as exc:
            raise SyncError(f"Jobber answered {response.status_code} without JSON") from exc
        if not isinstance(body, dict):
            raise SyncError("Jobber answered something other than a GraphQL response")
        errors = body.get("errors") or []
        if errors:
            extensions = _dict(body.get("extensions"))
            if any(isinstance(e, dict) and (e.get("extensions") or {}).get("code") == "THROTTLED" for e in errors):
                cost = _dict(extensions.get("cost"))
                raise Throttled("Jobber: query cost over the account's budget", wait=_throttle_wait(cost))
            message = "; ".join(str(e.get("message")) for e in errors if isinstance(e, dict))[:400]
            raise Refused(f"Jobber refused the query: {message or errors!r}")
        if response.status_code >= 400:
            raise Refused(f"Jobber answered {response.status_code}")
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    # -- webhooks ------------------------------------------------------------------------------

    def verify(self, body: bytes, headers: Mapping[str, str]) -> bool:
        secret = str(settings.JOBBER_CLIENT_SECRET)
        given = headers.get(SIGNATURE_HEADER, "")
        return bool(secret and given) and hmac.compare_digest(given.encode(), jobber_signature(secret, body).encode())

    def notice(self, data: dict[str, Any]) -> Notice:
        event = _dict(data.get("data")).get("webHookEvent")
        if not isinstance(event, dict):
            raise MalformedPayload("no data.webHookEvent object")
        topic, account = str(event.get("topic") or ""), str(event.get("accountId") or "")
        if not topic or not account:
            raise MalformedPayload("the webHookEvent has no topic or accountId")
        # Jobber's docs spell it occuredAt in places; both are read.
        occurred = str(event.get("occurredAt") or event.get("occuredAt") or "")
        item = str(event.get("itemId") or "")
        if topic == DISCONNECT_TOPIC:
            return Notice(account, topic, "", item, occurred, disconnected=True)
        if topic not in TOPICS:
            return Notice(account, topic, "", item, occurred)  # a topic we do not act on: kept, ignored
        prefix, _, verb = topic.rpartition("_")
        if not item:
            raise MalformedPayload(f"topic {topic!r} names no itemId")
        return Notice(account, topic, TOPIC_KINDS[prefix], item, occurred, deleted=verb == "DESTROY")

    # -- pulling ---------------------------------------------------------------------------------

    def pull(self, session: Session, ask: PullAsk) -> Page:
        one, many, fields = RECORDS[ask.kind]
        if ask.external_id:
            query = f"query One($id: EncodedId!) {{ {one}(id: $id) {{ {fields} }} }}"
            node = self._graphql(session, query, {"id": ask.external_id}).get(one)
            return Page([self._remote(ask.kind, node)] if isinstance(node, dict) else [])
        query = (
            f"query Changed($first: Int, $after: String, $since: ISO8601DateTime) {{ {many}(first: $first, "
            f"after: $after, filter: {{ updatedAt: {{ after: $since }} }}) {{ nodes {{ {fields} }} "
            "pageInfo { hasNextPage endCursor } } }"
        )
        # JOBBER_PAGE_SIZE, when set, shrinks the pages (tests).
        first = int(getattr(settings, "JOBBER_PAGE_SIZE", PAGE_SIZE))
        variables = {"first": first, "after": ask.after or None, "since": ask.since or None}
        found = self._graphql(session, query, variables).get(many) or {}
        info = found.get("pageInfo") or {}
        items = [self._remote(ask.kind, node) for node in found.get("nodes") or [] if isinstance(node, dict)]
        return Page(items, str(info.get("endCursor") or ""), bool(info.get("hasNextPage")))

    def _remote(self, kind: str, node: dict[str, Any]) -> Remote:
        version = str(node.get("updatedAt") or "")
        client = _id(node.get("client"))
        if kind == CLIENT:
            return Remote(
                kind,
                _id(node),
                version,
                {
                    "first_name": str(node.get("firstName") or ""),
                    "last_name": str(node.get("lastName") or ""),
                    "emails": _texts(node.get("emails"), "address"),
                    "phones": _texts(node.get("phones"), "number"),
                },
            )
        if kind == ESTIMATE:
            status = str(node.get("quoteStatus") or "").lower()
            amounts = _dict(node.get("amounts"))
            refs = {CLIENT: client, REQUEST: _id(node.get("request"))}
            fields = {
                "status": QUOTE_STATUS.get(status, Estimate.Status.SENT),
                "amount": _money(amounts.get("total") or 0),
                "sent_at": _time(node.get("sentAt")) or _time(version),
                "description": str(node.get("title") or f"Jobber quote #{node.get('quoteNumber') or ''}"),
            }
            return Remote(kind, _id(node), version, fields, refs)
        if kind == JOB:
            status = str(node.get("jobStatus") or "").lower()
            completed = _time(node.get("completedAt"))
            done = completed is not None or status in CLOSED_JOB
            fields = {
                "status": Job.Status.COMPLETED if done else Job.Status.SCHEDULED,
                "scheduled_for": _time(node.get("startAt")),
                "completed_at": completed or (_time(version) if done else None),
                "title": str(node.get("title") or f"Jobber job #{node.get('jobNumber') or ''}"),
            }
            refs = {CLIENT: client, REQUEST: _id(node.get("request")), ESTIMATE: _id(node.get("quote"))}
            return Remote(kind, _id(node), version, fields, refs)
        if kind == VISIT:
            status = str(node.get("visitStatus") or "").lower()
            fields = {
                "status": "held" if status == "completed" or node.get("completedAt") else "scheduled",
                "starts_at": _time(node.get("startAt")),
                "ends_at": _time(node.get("endAt")),
                "title": str(node.get("title") or ""),
            }
            return Remote(kind, _id(node), version, fields, {CLIENT: client, JOB: _id(node.get("job"))})
        if kind == INVOICE:
            status = str(node.get("invoiceStatus") or "").lower()
            amounts = _dict(node.get("amounts"))
            jobs = _dict(node.get("jobs")).get("nodes")
            fields = {
                "status": INVOICE_STATUS.get(status, Invoice.Status.ISSUED),
                "amount": _money(amounts.get("total") or 0),
                "number": str(node.get("invoiceNumber") or "")[:64],
                "issued_at": _time(node.get("issuedDate")),
                "due_at": _time(node.get("dueDate")),
            }
            refs = {CLIENT: client, JOB: _id((jobs or [{}])[0])}
            return Remote(kind, _id(node), version, fields, refs)
        if kind == PAYMENT:
            payer = _dict(node.get("client"))
            fields = {
                "amount": _money(node.get("amount") or 0),
                "received_at": _time(node.get("entryDate")) or _time(version),
                "emails": _texts(payer.get("emails"), "address"),
                "phones": _texts(payer.get("phones"), "number"),
            }
            return Remote(kind, _id(node), version, fields, {CLIENT: client, INVOICE: _id(node.get("invoice"))})
        raise SyncError(f"Jobber records of kind {kind!r} are not read")

    # -- pushing -----------------------------------------------------------------------------------

    def push(self, session: Session, item: PushPerson | PushBooking) -> Pushed:
        if isinstance(item, PushPerson):
            return self._client(session, item)
        return self._request(session, item)

    def _client(self, session: Session, person: PushPerson) -> Pushed:
        """The client with one of the person's emails or phones, else a new one."""
        wanted = {e.lower() for e in person.emails} | {_digits(p) for p in person.phones}
        for term in (*person.emails, *person.phones):
            found = self._graphql(session, CLIENTS_QUERY, {"search": term, "first": 10}).get("clients") or {}
            for node in found.get("nodes") or []:
                theirs = {e.lower() for e in _texts(node.get("emails"), "address")}
                theirs |= {_digits(p) for p in _texts(node.get("phones"), "number")}
                if wanted & theirs:
                    return Pushed(_id(node), str(node.get("updatedAt") or ""))
        payload: dict[str, Any] = {"firstName": person.first_name, "lastName": person.last_name}
        if person.emails:
            payload["emails"] = [{"description": "MAIN", "primary": True, "address": person.emails[0]}]
        if person.phones:
            payload["phones"] = [{"description": "MAIN", "primary": True, "number": person.phones[0]}]
        if person.address:
            payload["billingAddress"] = {"street1": person.address}
        made = self._graphql(session, CLIENT_CREATE, {"input": payload}).get("clientCreate") or {}
        return _made(made, "client")

    def _request(self, session: Session, booking: PushBooking) -> Pushed:
        """The client's request that names our lead, else a new one."""
        client = self._graphql(session, CLIENT_REQUESTS, {"id": booking.client_id}).get("client") or {}
        for node in ((client.get("requests") or {}).get("nodes")) or []:
            if isinstance(node, dict) and booking.record in str(node.get("title") or ""):
                return Pushed(_id(node), str(node.get("updatedAt") or ""))
        payload = {"clientId": booking.client_id, "title": booking.title[:255]}
        made = self._graphql(session, REQUEST_CREATE, {"input": payload}).get("requestCreate") or {}
        return _made(made, "request")


def _made(answer: dict[str, Any], what: str) -> Pushed:
    errors = [e.get("message") for e in answer.get("userErrors") or [] if isinstance(e, dict)]
    if errors:
        raise Refused(f"Jobber refused the {what}: {'; '.join(str(e) for e in errors)[:400]}")
    record = _dict(answer.get(what))
    if not _id(record):
        raise SyncError(f"Jobber answered the {what} create without an id")
    return Pushed(_id(record), str(record.get("updatedAt") or ""))


def _digits(phone: str) -> str:
    digits = "".join(c for c in phone if c.isdigit())
    # A North American number with or without its leading 1 is one number.
    return digits[1:] if len(digits) == 11 and digits.startswith("1") else digits


def _oauth_error(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    return str(body.get("error") or f"HTTP {response.status_code}") if isinstance(body, dict) else "refused"
