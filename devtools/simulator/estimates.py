"""Visits held and estimates decided, for `manage.py simulate`.

Estimates have no provider webhook: a person's tool writes them through the
API. With a team member's API token (`--token` or SIMULATE_API_TOKEN), about
a sixth of the simulated people (with a phone or an email, not already booked
or paying elsewhere in the plan) go the whole way:

1. a Calendly booking of a visit that began a few hours ago (signed as
   Calendly signs, carrying the lead's id like the business's own links);
2. once the server has processed it, `POST /api/v1/appointments/<id>/held/`
   (the technician says the visit happened) and `POST /api/v1/estimates/`
   with `send: true` — one of them above the high value of the demo's HVAC
   line, so it waits for a manager's approval when the lead is HVAC;
3. the customer's decision, `POST /api/v1/estimates/<id>/accept/` or
   `/decline/`, for two of every three; the rest stay open, and the
   business's `open_estimate` path starts `estimate_follow_up_days` later.

Every id these posts need (the lead, the appointment, the estimate) is read
from the server's read API with the same token when the post is sent,
waiting at most `WAIT_SECONDS` for the server's workers to catch up; a record
that never appears is reported as "no answer" (an unexpected status). One
estimate with a negative amount (400) and one with a wrong token (401) are
meant to fail.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import requests

from devtools.polling import poll_until
from devtools.simulator.base import BAD_SIGNATURE, MALFORMED, STORES_NONE, Job, Post, PostNotReady, counts_text
from devtools.simulator.bookings import (
    API,
    booking_finisher,
    calendly_envelope,
    calendly_invitee,
    signing_key,
    uri_token,
)

VISIT = "visit"
HELD = "held"
ESTIMATE = "estimate"
ACCEPT = "accept"
DECLINE = "decline"
VISIT_PHASE = 10
ESTIMATE_PHASE = 11
DECISION_PHASE = 12
WAIT_SECONDS = 30.0
AMOUNTS = ("450.00", "1280.00", "3675.50", "6200.00", "8940.00", "2150.00")
HIGH_VALUE_AMOUNT = "12500.00"  # above the demo's HVAC high value (10,000)
DESCRIPTIONS = (
    "Replace the furnace blower motor and capacitor",
    "New 3-ton air conditioner, line set and pad",
    "Water heater replacement, 50 gallon, haul-away included",
    "Clear the main drain and camera inspection",
    "Heat pump repair: reversing valve and refrigerant recharge",
)
DECLINE_REASONS = ("went with a cheaper quote", "decided to wait until spring", "the landlord will handle it")
OPEN_STAGES_FOR_VISIT = ("booked",)


class _Server:
    """The server's read API, as the token's owner sees it; waits for records to appear."""

    def __init__(self, token: str, wait: float) -> None:
        self.token, self.wait = token, wait

    def get(self, base_url: str, path: str, **params: str) -> list[dict[str, Any]]:
        response = requests.get(
            f"{base_url}{path}?{urlencode(params)}",
            headers={"Authorization": f"Token {self.token}", "Accept": "application/json"},
            timeout=(5, 30),
        )
        if response.status_code != 200:
            raise PostNotReady(f"GET {path} answered {response.status_code}: {response.text[:160]}")
        return list(response.json().get("results", []))

    def until(self, what: str, look: Callable[[], Any]) -> Any:
        found = poll_until(look, timeout=self.wait)
        if not found:
            raise PostNotReady(f"{what} did not appear within {self.wait:.0f} s (is the task cluster running?)")
        return found

    def lead(self, base_url: str, person: Any, stages: tuple[str, ...] = ()) -> dict[str, Any]:
        query = {"phone": person.phone} if person.phone else {"email": person.email}

        def look() -> dict[str, Any] | None:
            leads = self.get(base_url, "/api/v1/leads/", **query)  # newest first
            return next((lead for lead in leads if not stages or lead["stage"] in stages), None)

        return dict(self.until(f"person {person.number}'s lead", look))


def _json_post(token: str, body: dict[str, Any] | None = None) -> Callable[[], tuple[bytes, dict[str, str]]]:
    def prepare() -> tuple[bytes, dict[str, str]]:
        data = json.dumps(body or {}).encode()
        return data, {"Content-Type": "application/json", "Authorization": f"Token {token}"}

    return prepare


def estimate_jobs(ctx: Any, rng: random.Random, plan: Any, now: datetime, *, wait: float = WAIT_SECONDS) -> list[Any]:
    """The visits, estimates and decisions of the plan (see the module docstring)."""
    elsewhere = {p.person for p in plan.posts if p.builder in ("calendly", "stripe")}
    candidates = [
        p
        for p in plan.people
        if (p.phone or p.email)
        and not p.is_google_test
        and p.number not in elsewhere
        and plan.channels.get(p.number, []) != ["meta"]  # a Meta-only lead depends on the Graph stand-in
    ]
    if not candidates:
        return []
    chosen = rng.sample(candidates, min(len(candidates), max(1, round(len(plan.people) / 6))))
    server = _Server(ctx.api_token, wait)
    key = signing_key(ctx)
    calendly = f"/hooks/calendly/{ctx.sources['calendly'][0].key}/"
    jobs: list[Any] = []

    def api_post(intent: str, person: Any, body: dict[str, Any] | None, route: Callable[[str], str]) -> Any:
        return Post(
            "estimates",
            intent,
            "/api/v1/",
            b"",
            {},
            expect=frozenset({200, 201}),
            stores=STORES_NONE,
            person=person.number,
            prepare=_json_post(ctx.api_token, body),
            route=route,
        )

    for n, person in enumerate(chosen):
        # 1. The visit, booked days ago through Calendly, began hours ago.
        event_uri = f"{API}/scheduled_events/{uri_token(rng)}"
        starts, booked_at = now - timedelta(hours=rng.randint(3, 6)), now - timedelta(days=rng.randint(2, 5))
        invitee = calendly_invitee(f"{event_uri}/invitees/{uri_token(rng)}", event_uri, person, starts, booked_at)
        event = calendly_envelope("invitee.created", invitee, booked_at)
        visit = Post(
            "calendly",
            VISIT,
            calendly,
            b"",
            {},
            event_provider="calendly",
            person=person.number,
            prepare=booking_finisher(event, key, ctx.business_slug, person, carry_lead=True),
        )
        jobs.append(Job(VISIT_PHASE, [visit]))

        # 2. The visit is marked held, and the estimate sent, by the team's tool.
        found: dict[str, str] = {}

        def held_route(base_url: str, person: Any = person, found: dict[str, str] = found) -> str:
            lead = server.lead(base_url, person, OPEN_STAGES_FOR_VISIT)

            def started() -> dict[str, Any] | None:
                rows = server.get(base_url, "/api/v1/appointments/", lead=lead["id"])
                due = [a for a in rows if a["status"] in ("scheduled", "confirmed") and _started(a["starts_at"])]
                return due[0] if due else None

            appointment = server.until(f"the visit of {lead['id']}", started)
            found["lead"] = lead["id"]
            return f"/api/v1/appointments/{appointment['id']}/held/"

        amount = HIGH_VALUE_AMOUNT if n == 2 else rng.choice(AMOUNTS)
        body = {"amount": amount, "currency": "USD", "description": rng.choice(DESCRIPTIONS), "send": True}

        def estimate_route(base_url: str, found: dict[str, str] = found, body: dict[str, Any] = body) -> str:
            if "lead" not in found:
                # The held post before it found no visit: nothing processed the booking.
                raise PostNotReady(
                    "no visit was marked held, so the estimate names no lead (is the task cluster running?)"
                )
            body["lead"] = found["lead"]  # read by the held post just before, in the same job
            return "/api/v1/estimates/"

        # The body is serialized when sent: after its route named the lead.
        estimate = api_post(ESTIMATE, person, body, estimate_route)
        jobs.append(Job(ESTIMATE_PHASE, [api_post(HELD, person, None, held_route), estimate]))

        # 3. The customer decides: accept, decline, or not yet (n % 3 == 2, the high-value one among them).
        if n % 3 == 2:
            continue
        verb = ACCEPT if n % 3 == 0 else DECLINE
        decision = {"reason": rng.choice(DECLINE_REASONS)} if verb == DECLINE else {}

        def decision_route(base_url: str, person: Any = person, verb: str = verb) -> str:
            lead = server.lead(base_url, person)

            def sent() -> dict[str, Any] | None:
                rows = server.get(base_url, "/api/v1/estimates/", lead=lead["id"])
                return next((e for e in reversed(rows) if e["status"] == "sent"), None)

            estimate = server.until(f"the estimate of {lead['id']}", sent)
            return f"/api/v1/estimates/{estimate['id']}/{verb}/"

        jobs.append(Job(DECISION_PHASE, [api_post(verb, person, decision, decision_route)]))

    # Meant to fail: a negative amount (400), and a token that is not one (401).
    first = chosen[0]
    bad: dict[str, Any] = {"amount": "-120.00", "currency": "USD", "send": True}

    def bad_route(base_url: str, person: Any = first, bad: dict[str, Any] = bad) -> str:
        bad["lead"] = server.lead(base_url, person)["id"]
        return "/api/v1/estimates/"

    malformed = api_post(MALFORMED, first, bad, bad_route)
    malformed.expect = frozenset({400})
    forged = Post(
        "estimates",
        BAD_SIGNATURE,
        "/api/v1/estimates/",
        b"",
        {},
        expect=frozenset({401}),
        stores=STORES_NONE,
        prepare=_json_post("0" * 40, {"lead": "lead_unknown", "amount": "100.00"}),
    )
    jobs.append(Job(ESTIMATE_PHASE, [malformed, forged]))
    return jobs


def _started(starts_at: str) -> bool:
    from django.utils import timezone
    from django.utils.dateparse import parse_datetime

    when = parse_datetime(starts_at)
    return when is not None and when <= timezone.now()


def summary(intents: Counter[str], results: list[Any]) -> str:
    """One line for `simulate`'s report."""
    created = [r for r in results if r.post.intent == ESTIMATE and r.status == 201]
    waiting = sum(1 for r in created if '"status":"pending_approval"' in r.detail)
    return (
        f"Estimates (API): {intents[HELD]} visits held, {intents[ESTIMATE]} estimates "
        f"({waiting} waiting for approval), {intents[ACCEPT]} accepted, {intents[DECLINE]} declined "
        f"({counts_text(r.status for r in results)})"
    )
