"""Google Local Services Ads leads, planted: LSA has no webhook (the server
polls the Google Ads API every minute), so there is nothing to post. A
stand-in of the two Google Ads API methods the poller and its feedback call
serves the leads planted here, in the library's own request and response
types:

* GoogleAdsService.Search — GAQL over `local_services_lead` and
  `local_services_lead_conversation`: `SELECT fields FROM resource [WHERE
  field op value AND …] [ORDER BY field [ASC|DESC]] [LIMIT n]`, ops = != > >=
  < <= IN. Only the fields selected come back, and a field the resource does
  not have is refused as Google refuses it (a query error), so a query of
  ours that Google would refuse fails here too. Times compare as the strings
  Google writes them ("YYYY-MM-DD HH:MM:SS", which sort as they compare).
  The same method answers the campaign report the spend pull runs
  (agents.conversions.spend_google): `SELECT campaign.…, segments.date,
  metrics.…, customer.currency_code FROM campaign WHERE segments.date BETWEEN
  'a' AND 'b'`, over the campaign days planted in `campaign_days`
  (`campaign_day_row`), `page_size` rows a page with Google's
  `next_page_token` (a token is good only for the query it came with).
* LocalServicesLeadService.ProvideLeadFeedback — kept in `feedback`, the lead
  marked `lead_feedback_submitted`.

Each call is answered per its plan (`search_plan`, `feedback_plan`), then per
its default: "ok"; "auth" refuses the request (UNAUTHENTICATED, with the
AUTHENTICATION_ERROR failure in the trailing metadata, as Google does);
"unavailable" answers UNAVAILABLE; for feedback, "lost" takes it and then
answers UNAVAILABLE (an answer lost on the way back).

`LocalServicesStandIn.handlers()` adds both methods to any gRPC server (the
tests' Google Ads stand-in, tests/helpers/google_ads.py); `lsa_serving()`
runs them on their own, beside an OAuth token endpoint, for a server started
with GOOGLE_ADS_ENDPOINT and GOOGLE_OAUTH_TOKEN_URL pointing at them;
`leads_plant` invents realistic leads and their first messages; and
`lsa_simulate` serves them for a business's google_lsa sources until the
running server's poller has read them.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

import grpc
from django.utils import timezone
from google.ads.googleads.v26.errors.types import errors as ads_errors
from google.ads.googleads.v26.resources.types.local_services_lead import LocalServicesLead
from google.ads.googleads.v26.resources.types.local_services_lead_conversation import LocalServicesLeadConversation
from google.ads.googleads.v26.services.types import google_ads_service as search_types
from google.ads.googleads.v26.services.types import local_services_lead_service as lead_service

from devtools.polling import poll_until

VERSION = "v26"
FAILURE_KEY = f"google.ads.googleads.{VERSION}.errors.googleadsfailure-bin"
LEADS = "local_services_lead"
CONVERSATIONS = "local_services_lead_conversation"
RESOURCES: dict[str, Any] = {LEADS: LocalServicesLead, CONVERSATIONS: LocalServicesLeadConversation}
# A campaign report selects the campaign's fields and what Google segments and
# measures it by, and its customer's: the GoogleAdsRow fields of these names.
CAMPAIGN = "campaign"
CAMPAIGN_PARTS = ("campaign", "segments", "metrics", "customer")
# Google's page size for Search (fixed since v17; a test may shrink it).
PAGE_SIZE = 10_000
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class QueryRefused(ValueError):
    """A query Google would refuse; the message is Google's kind of reason."""


# --- GAQL, as much as the poller uses ---------------------------------------------------------

_QUERY = re.compile(
    r"^\s*SELECT\s+(?P<fields>.+?)\s+FROM\s+(?P<resource>\w+)"
    r"(?:\s+WHERE\s+(?P<where>.+?))?(?:\s+ORDER\s+BY\s+(?P<order>.+?))?(?:\s+LIMIT\s+(?P<limit>\d+))?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_CONDITION = re.compile(
    r"^(?P<field>[\w.]+)\s*(?P<op>>=|<=|!=|=|>|<|\bIN\b)\s*(?P<value>.+)$", re.IGNORECASE | re.DOTALL
)


@dataclass(frozen=True)
class Query:
    resource: str
    fields: tuple[str, ...]
    conditions: tuple[tuple[str, str, Any], ...]
    order: tuple[str, bool] | None  # (field, descending)
    limit: int | None


def _literal(text: str) -> Any:
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        return [_literal(part) for part in text[1:-1].split(",") if part.strip()]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return int(text) if text.lstrip("-").isdigit() else text


def _field_known(resource: str, path: str) -> bool:
    parts = path.split(".")
    if parts[0] != resource or len(parts) < 2:
        return False
    descriptor = RESOURCES[resource].pb().DESCRIPTOR
    for part in parts[1:]:
        if descriptor is None or part not in descriptor.fields_by_name:
            return False
        descriptor = descriptor.fields_by_name[part].message_type
    return True


def _row_field_known(path: str) -> bool:
    """A campaign report's field: one of the GoogleAdsRow parts it may name."""
    parts = path.split(".")
    if parts[0] not in CAMPAIGN_PARTS or len(parts) < 2:
        return False
    descriptor = search_types.GoogleAdsRow.pb().DESCRIPTOR.fields_by_name[parts[0]].message_type
    for part in parts[1:]:
        if descriptor is None or part not in descriptor.fields_by_name:
            return False
        descriptor = descriptor.fields_by_name[part].message_type
    return True


_BETWEEN = re.compile(r"([\w.]+)\s+BETWEEN\s+('[^']*'|\S+)\s+AND\s+('[^']*'|\S+)", re.IGNORECASE)


def gaql_parse(text: str) -> Query:
    """The query, or QueryRefused for one Google would not run."""
    match = _QUERY.match(text)
    if match is None:
        raise QueryRefused("query_error.PROHIBITED_CLAUSE_IN_SELECT: not a query this stand-in reads")
    resource = match["resource"]
    if resource not in RESOURCES and resource != CAMPAIGN:
        raise QueryRefused(f"query_error.INVALID_RESOURCE: {resource!r} is not served here")
    fields = tuple(f.strip() for f in match["fields"].split(",") if f.strip())
    conditions = []
    # `f BETWEEN a AND b` is `f >= a AND f <= b`, both ends included.
    where = _BETWEEN.sub(r"\1 >= \2 AND \1 <= \3", match["where"] or "")
    for part in re.split(r"\s+AND\s+", where, flags=re.IGNORECASE) if where else []:
        condition = _CONDITION.match(part.strip())
        if condition is None:
            raise QueryRefused(f"query_error.UNEXPECTED_INPUT: cannot read the condition {part.strip()!r}")
        conditions.append((condition["field"], condition["op"].upper(), _literal(condition["value"])))
    order = None
    if match["order"]:
        words = match["order"].split()
        order = (words[0], len(words) > 1 and words[1].upper() == "DESC")
    known = _row_field_known if resource == CAMPAIGN else lambda path: _field_known(resource, path)
    for path in [*fields, *(c[0] for c in conditions), *([order[0]] if order else [])]:
        if not known(path):
            raise QueryRefused(f"query_error.UNRECOGNIZED_FIELD: unrecognized field in the query: {path!r}")
    return Query(resource, fields, tuple(conditions), order, int(match["limit"]) if match["limit"] else None)


def _value(row: dict[str, Any], path: str) -> Any:
    value: Any = row
    for part in path.split(".")[1:]:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _holds(value: Any, op: str, wanted: Any) -> bool:
    if op == "IN":
        return value in wanted
    if value is None:
        return False
    if isinstance(value, int) != isinstance(wanted, int):
        value, wanted = str(value), str(wanted)
    return bool(
        {
            "=": value == wanted,
            "!=": value != wanted,
            ">": value > wanted,
            ">=": value >= wanted,
            "<": value < wanted,
            "<=": value <= wanted,
        }[op]
    )


def _selected(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in fields:
        parts = path.split(".")[1:]
        value = _value(row, path)
        if value is None:
            continue
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


# --- the stand-in -------------------------------------------------------------------------------


class LocalServicesStandIn:
    """Planted leads and conversations (dicts in the resources' JSON shape,
    snake_case, enums by name), what was asked and what was taken."""

    def __init__(self) -> None:
        self.leads: list[dict[str, Any]] = []
        self.conversations: list[dict[str, Any]] = []
        self.search_plan: list[str] = []
        self.search_default = "ok"
        self.feedback_plan: list[str] = []
        self.feedback_default = "ok"
        self.searches: list[dict[str, Any]] = []
        self.feedback: list[dict[str, Any]] = []
        self.served: set[str] = set()  # the resource names a search returned
        # Campaign report rows (campaign_day_row), and the page tokens handed out.
        self.campaign_days: list[dict[str, Any]] = []
        self.page_size = PAGE_SIZE
        self.page_tokens: dict[str, tuple[str, str, int]] = {}
        self.lock = threading.Lock()

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        return (
            grpc.method_handlers_generic_handler(
                f"google.ads.googleads.{VERSION}.services.GoogleAdsService",
                {
                    "Search": grpc.unary_unary_rpc_method_handler(
                        self._search,
                        request_deserializer=search_types.SearchGoogleAdsRequest.deserialize,
                        response_serializer=search_types.SearchGoogleAdsResponse.serialize,
                    )
                },
            ),
            grpc.method_handlers_generic_handler(
                f"google.ads.googleads.{VERSION}.services.LocalServicesLeadService",
                {
                    "ProvideLeadFeedback": grpc.unary_unary_rpc_method_handler(
                        self._feedback,
                        request_deserializer=lead_service.ProvideLeadFeedbackRequest.deserialize,
                        response_serializer=lead_service.ProvideLeadFeedbackResponse.serialize,
                    )
                },
            ),
        )

    def lead(self, resource_name: str) -> dict[str, Any] | None:
        return next((lead for lead in self.leads if lead.get("resource_name") == resource_name), None)

    def _refuse(self, context: grpc.ServicerContext, answer: str) -> None:
        if answer == "auth":
            _abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                ads_errors.ErrorCode(authentication_error="OAUTH_TOKEN_INVALID"),
                "Oauth token in the header is not valid.",
                "Request is missing required authentication credential.",
            )
        if answer == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "The service is currently unavailable.")

    def _search(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
            self.searches.append({"customer_id": request.customer_id, "query": request.query, "metadata": metadata})
            answer = self.search_plan.pop(0) if self.search_plan else self.search_default
            self._refuse(context, answer)
            try:
                query = gaql_parse(request.query)
            except QueryRefused as exc:
                code, _, message = str(exc).partition(": ")
                _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    ads_errors.ErrorCode(query_error=code.split(".")[1]),
                    message,
                    "Request contains an invalid argument.",
                )
            if query.resource == CAMPAIGN:
                return self._campaign_report(request, query, context)
            planted = self.leads if query.resource == LEADS else self.conversations
            prefix = f"customers/{request.customer_id}/"
            rows = [
                row
                for row in planted
                if str(row.get("resource_name", "")).startswith(prefix)
                and all(_holds(_value(row, f), op, v) for f, op, v in query.conditions)
            ]
            if query.order:
                field, descending = query.order
                rows.sort(key=lambda row: str(_value(row, field) or ""), reverse=descending)
            rows = rows[: query.limit] if query.limit is not None else rows
            self.served.update(str(row.get("resource_name")) for row in rows)
            cls = RESOURCES[query.resource]
            results = [
                search_types.GoogleAdsRow(**{query.resource: cls.from_json(json.dumps(_selected(row, query.fields)))})
                for row in rows
            ]
            return search_types.SearchGoogleAdsResponse(results=results)

    def _campaign_report(self, request: Any, query: Query, context: grpc.ServicerContext) -> Any:
        """The campaign days of the request's customer that hold, a page of
        them, and the token of the next page when there is one."""
        offset = 0
        if request.page_token:
            held = self.page_tokens.get(request.page_token)
            if held is None or held[:2] != (request.customer_id, request.query):
                _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    ads_errors.ErrorCode(request_error="INVALID_PAGE_TOKEN"),
                    "Page token is invalid.",
                    "Request contains an invalid argument.",
                )
            offset = held[2]
        rows = [
            row
            for row in self.campaign_days
            if str(row["customer"]["id"]) == request.customer_id
            and all(_holds(_row_value(row, f), op, v) for f, op, v in query.conditions)
        ]
        rows.sort(key=lambda row: (str(row["segments"]["date"]), str(row["campaign"]["id"])))
        page = rows[offset : offset + self.page_size]
        following = ""
        if offset + self.page_size < len(rows):
            following = f"pt-{len(self.page_tokens) + 1:06d}"
            self.page_tokens[following] = (request.customer_id, request.query, offset + self.page_size)
        results = [search_types.GoogleAdsRow.from_json(json.dumps(_row_selected(row, query.fields))) for row in page]
        return search_types.SearchGoogleAdsResponse(results=results, next_page_token=following)

    def _feedback(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            answer = self.feedback_plan.pop(0) if self.feedback_plan else self.feedback_default
            self._refuse(context, answer)
            lead = self.lead(request.resource_name)
            if lead is None:
                _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    ads_errors.ErrorCode(mutate_error="RESOURCE_NOT_FOUND"),
                    "The requested resource was not found.",
                    "Request contains an invalid argument.",
                )
            taken = type(request).to_dict(request, use_integers_for_enums=False)
            self.feedback.append(taken)
            lead["lead_feedback_submitted"] = True
            if answer == "lost":
                context.abort(grpc.StatusCode.UNAVAILABLE, "The service is currently unavailable.")
            decision = "SUCCESS_NOT_REACHED_THRESHOLD" if "survey_dissatisfied" in taken else "UNSPECIFIED"
            return lead_service.ProvideLeadFeedbackResponse(credit_issuance_decision=decision)


def _abort(context: grpc.ServicerContext, status: grpc.StatusCode, code: Any, message: str, details: str) -> NoReturn:
    failure = ads_errors.GoogleAdsFailure(errors=[ads_errors.GoogleAdsError(error_code=code, message=message)])
    context.set_trailing_metadata(
        ((FAILURE_KEY, ads_errors.GoogleAdsFailure.serialize(failure)), ("request-id", "req-local-lsa"))
    )
    context.abort(status, details)
    raise AssertionError("abort raises")  # for the type checker: grpc's abort is not typed NoReturn


def _row_value(row: dict[str, Any], path: str) -> Any:
    value: Any = row
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _row_selected(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in fields:
        value = _row_value(row, path)
        if value is None:
            continue
        *parents, last = path.split(".")
        target = out
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return out


# --- rows ---------------------------------------------------------------------------------------


def campaign_day_row(
    customer_id: str,
    campaign_id: str,
    *,
    day: str,
    name: str,
    cost_micros: int,
    clicks: int = 0,
    impressions: int = 0,
    currency: str = "USD",
) -> dict[str, Any]:
    """One campaign's day in a campaign report, in GoogleAdsRow's JSON shape
    (`day` is "YYYY-MM-DD", the account's day; cost in micros of its currency)."""
    return {
        "customer": {"id": int(customer_id), "currency_code": currency},
        "campaign": {
            "resource_name": f"customers/{customer_id}/campaigns/{campaign_id}",
            "id": int(campaign_id),
            "name": name,
        },
        "segments": {"date": day},
        "metrics": {"cost_micros": cost_micros, "clicks": clicks, "impressions": impressions},
    }


def lead_row(
    customer_id: str,
    lead_id: int,
    *,
    created: str,
    lead_type: str = "PHONE_CALL",
    phone: str = "",
    name: str = "",
    category_id: str = "xcat:service_area_business_hvac",
    service_id: str = "install_heating",
    campaign_id: str = "",
    status: str = "NEW",
    charged: bool = True,
) -> dict[str, Any]:
    """One `local_services_lead` in the shape Google serves it."""
    row: dict[str, Any] = {
        "resource_name": f"customers/{customer_id}/localServicesLeads/{lead_id}",
        "id": str(lead_id),
        "category_id": category_id,
        "service_id": service_id,
        "contact_details": {"phone_number": phone, "consumer_name": name},
        "lead_type": lead_type,
        "lead_status": status,
        "creation_date_time": created,
        "locale": "en-US",
        "lead_charged": charged,
        "lead_feedback_submitted": False,
    }
    if campaign_id:
        row["campaign"] = f"customers/{customer_id}/campaigns/{campaign_id}"
    return row


def conversation_row(
    customer_id: str,
    conversation_id: int,
    *,
    lead: str,
    at: str,
    text: str = "",
    participant: str = "CONSUMER",
    channel: str = "MESSAGE",
) -> dict[str, Any]:
    """One `local_services_lead_conversation`: a message (or a call) on a lead."""
    row: dict[str, Any] = {
        "resource_name": f"customers/{customer_id}/localServicesLeadConversations/{conversation_id}",
        "id": str(conversation_id),
        "conversation_channel": channel,
        "participant_type": participant,
        "lead": lead,
        "event_date_time": at,
    }
    if channel == "PHONE_CALL":
        row["phone_call_details"] = {"call_duration_millis": "84000", "call_recording_url": ""}
    else:
        row["message_details"] = {"text": text, "attachment_urls": []}
    return row


# --- for `simulate` -----------------------------------------------------------------------------

FIRST_NAMES = ("Maria", "James", "Aisha", "Wei", "Carlos", "Emily", "Dmitri", "Priya", "Noah", "Fatima")
LAST_NAMES = ("Garcia", "Johnson", "Khan", "Chen", "Rossi", "Nguyen", "Okafor", "Smith", "Patel", "Brown")
SERVICES = (
    ("xcat:service_area_business_hvac", "install_heating", "Hi, our furnace is 20 years old. Can you quote a new one?"),
    ("xcat:service_area_business_hvac", "repair_ac", "AC stopped cooling this morning, can someone come today?"),
    ("xcat:service_area_business_plumber", "drain_cleaning", "Kitchen sink is backing up. Are you available?"),
)


def leads_plant(
    stand_in: LocalServicesStandIn, accounts: list[tuple[str, ZoneInfo]], *, count: int, seed: int = 0
) -> list[str]:
    """`count` leads spread over the accounts (customer id, time zone), each
    made a minute or so ago in its account's time, half of them message
    leads with the person's first message; their resource names."""
    rng = random.Random(seed)
    planted = []
    with stand_in.lock:
        for n in range(count):
            customer, zone = accounts[n % len(accounts)]
            lead_id = rng.randrange(10**9, 10**10)
            category, service, text = rng.choice(SERVICES)
            created = timezone.now().astimezone(zone) - timedelta(seconds=rng.randrange(30, 120))
            lead_type = rng.choice(("PHONE_CALL", "MESSAGE"))
            row = lead_row(
                customer,
                lead_id,
                created=created.strftime(TIME_FORMAT),
                lead_type=lead_type,
                phone=f"+1312555{rng.randrange(100, 200):04d}",
                name=f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
                category_id=category,
                service_id=service,
                campaign_id=str(rng.randrange(10**10, 10**11)),
            )
            stand_in.leads.append(row)
            planted.append(row["resource_name"])
            if lead_type == "MESSAGE":
                stand_in.conversations.append(
                    conversation_row(
                        customer,
                        lead_id + 1,
                        lead=row["resource_name"],
                        at=(created + timedelta(seconds=5)).strftime(TIME_FORMAT),
                        text=text,
                    )
                )
    return planted


class _Tokens(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = json.dumps({"access_token": "ya29.simulated-token", "expires_in": 3599, "token_type": "Bearer"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@dataclass
class Serving:
    stand_in: LocalServicesStandIn
    endpoint: str  # GOOGLE_ADS_ENDPOINT
    token_url: str  # GOOGLE_OAUTH_TOKEN_URL


@contextmanager
def lsa_serving(port: int = 0, token_port: int = 0) -> Iterator[Serving]:
    """The stand-in on 127.0.0.1:`port` (gRPC, local credentials, as our
    client reaches GOOGLE_ADS_ENDPOINT) and an OAuth token endpoint on
    `token_port`; 0 picks free ports."""
    stand_in = LocalServicesStandIn()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(stand_in.handlers())
    bound = server.add_secure_port(
        f"127.0.0.1:{port}", grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    )
    tokens = ThreadingHTTPServer(("127.0.0.1", token_port), _Tokens)
    tokens.daemon_threads = True
    thread = threading.Thread(target=tokens.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    server.start()
    thread.start()
    try:
        yield Serving(stand_in, f"127.0.0.1:{bound}", f"http://127.0.0.1:{tokens.server_address[1]}/token")
    finally:
        server.stop(grace=None)
        tokens.shutdown()
        tokens.server_close()


# The ports `lsa_simulate` serves on unless told otherwise: the server under
# simulation runs with GOOGLE_ADS_ENDPOINT=127.0.0.1:8766 and
# GOOGLE_OAUTH_TOKEN_URL=http://127.0.0.1:8767/token.
LSA_PORT = 8766
LSA_TOKEN_PORT = 8767


def lsa_simulate(
    business_slug: str,
    *,
    leads: int,
    seed: int = 0,
    port: int = LSA_PORT,
    token_port: int = LSA_TOKEN_PORT,
    timeout: float = 150.0,
) -> list[str]:
    """Serve `leads` planted leads (and their first messages) over the
    business's active google_lsa sources until the running server's poller
    (its `leadops.google_lsa` job, every minute) has read them all, or
    `timeout` seconds; the report's lines. The server needs Google Ads
    credentials set (any values: the stand-in checks none) and its
    GOOGLE_ADS_ENDPOINT and GOOGLE_OAUTH_TOKEN_URL on these ports."""
    from crm.models import Provider, Source

    sources = list(
        Source.objects.filter(business__slug=business_slug, provider=Provider.GOOGLE_LSA, is_active=True)
        .select_related("business")
        .order_by("key")
    )
    accounts = [
        (
            re.sub(r"\D", "", str(source.config.get("customer_id") or "")),
            ZoneInfo(str(source.config.get("timezone") or source.business.timezone)),
        )
        for source in sources
    ]
    accounts = [(customer, zone) for customer, zone in accounts if customer]
    if not accounts:
        return ["google_lsa: no active google_lsa source with a customer_id: nothing planted"]
    with lsa_serving(port, token_port) as serving:
        planted = leads_plant(serving.stand_in, accounts, count=leads, seed=seed)
        poll_until(lambda: set(planted) <= serving.stand_in.served, timeout=timeout)
        read = len(set(planted) & serving.stand_in.served)
    lines = [f"google_lsa: {leads} leads planted over {len(accounts)} account(s), {read} read by the server's poller"]
    if read < leads:
        lines.append(
            f"google_lsa: {leads - read} never read within {timeout:.0f} s: is the task cluster running, and does "
            f"the server use GOOGLE_ADS_ENDPOINT=127.0.0.1:{port}?"
        )
    return lines
