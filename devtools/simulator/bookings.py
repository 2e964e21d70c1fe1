"""Signed Calendly bookings, cancellations and no-shows for `manage.py simulate`.

About a quarter of the simulated people who left an email or a phone book a
visit in Calendly (`invitee.created`); some of them cancel it
(`invitee.canceled`) and some miss it (`invitee_no_show.created`: those
visits began hours ago, as a no-show can only be marked after the start).
One booking comes from somebody the business has never heard of (the
Booking Matcher hands it to a person), one is re-sent byte for byte, and one
is signed with the wrong key.

Half of the bookings carry the person's lead id in the booking link's
`utm_content`, as the business's own booking links do; the lead is created by
the server's workers while the plan runs, so that id is read when the post is
sent (waiting a little for it). The others are matched by email or phone.
Every body is signed at the moment it is sent, as Calendly signs: a
signature older than three minutes is refused.
"""

from __future__ import annotations

import json
import random
import string
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agents.capture.providers.calendly import calendly_signature
from devtools.simulator.base import BAD_SIGNATURE, DUPLICATE, OK, REFUSED, STORES_NONE, STORES_SAME, Job, Post
from devtools.simulator.payments import lead_id_for

BOOKING = "booking"
CANCELLATION = "cancellation"
NO_SHOW = "no_show"
UNMATCHED = "unmatched_booking"
BOOKING_PHASE = 6
OUTCOME_PHASE = 7
API = "https://api.calendly.com"


def signing_key(ctx: Any) -> str:
    """The key the server checks: the Calendly source's secret, else CALENDLY_SIGNING_KEY."""
    from django.conf import settings

    sources = ctx.sources.get("calendly") or []
    return (sources[0].secret if sources else "") or str(settings.CALENDLY_SIGNING_KEY)


def uri_token(rng: random.Random, n: int = 16) -> str:
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def calendly_envelope(kind: str, invitee: dict[str, Any], created: datetime) -> dict[str, Any]:
    return {
        "created_at": _iso(created),
        "created_by": f"{API}/users/SIMULATEDHOST0001",
        "event": kind,
        "payload": invitee,
    }


def calendly_invitee(
    uri: str,
    event_uri: str,
    person: Any,
    starts: datetime,
    created: datetime,
    *,
    status: str = "active",
    cancellation: dict[str, Any] | None = None,
    no_show: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "uri": uri,
        "event": event_uri,
        "email": person.email or None,
        "name": person.name,
        "first_name": None,
        "last_name": None,
        "status": status,
        "timezone": "America/Chicago",
        "created_at": _iso(created),
        "updated_at": _iso(created),
        "rescheduled": False,
        "old_invitee": None,
        "new_invitee": None,
        "no_show": no_show,
        "payment": None,
        "cancel_url": f"https://calendly.com/cancellations/{uri[-16:]}",
        "reschedule_url": f"https://calendly.com/reschedulings/{uri[-16:]}",
        "questions_and_answers": [
            {"question": "What do you need help with?", "answer": person.request, "position": 0},
            {"question": "ZIP code", "answer": person.postal_code, "position": 1},
        ],
        "text_reminder_number": person.phone or None,
        "tracking": {
            "utm_source": "booking_link",
            "utm_medium": "sms",
            "utm_campaign": "follow_up",
            "utm_content": None,
            "utm_term": None,
            "salesforce_uuid": None,
        },
        "scheduled_event": {
            "uri": event_uri,
            "name": "Home visit (2 h)",
            "status": status,
            "start_time": _iso(starts),
            "end_time": _iso(starts + timedelta(hours=2)),
            "event_type": f"{API}/event_types/SIMULATEDTYPE0001",
            "location": {"type": "physical", "location": person.postal_code},
            "invitees_counter": {"total": 1, "active": 0 if status == "canceled" else 1, "limit": 1},
            "created_at": _iso(created),
            "updated_at": _iso(created),
            "event_memberships": [
                {
                    "user": f"{API}/users/SIMULATEDHOST0001",
                    "user_email": "tom@acme-hvac.example",
                    "user_name": "Tom Technician",
                }
            ],
            "event_guests": [],
            "cancellation": cancellation,
        },
        "cancellation": cancellation,
        "scheduling_method": None,
        "invitee_scheduled_by": None,
        "reconfirmation": None,
        "routing_form_submission": None,
    }


def booking_finisher(
    event: dict[str, Any], key: str, business_slug: str, person: Any, *, carry_lead: bool
) -> Callable[[], tuple[bytes, dict[str, str]]]:
    def finish() -> tuple[bytes, dict[str, str]]:
        if carry_lead and event["event"] == "invitee.created" and (person.phone or person.email):
            lead = lead_id_for(business_slug, person.phone, person.email)
            if lead:
                event["payload"]["tracking"]["utm_content"] = lead
        body = json.dumps(event, separators=(",", ":")).encode()
        return body, {
            "Content-Type": "application/json",
            "Calendly-Webhook-Signature": calendly_signature(key, body, int(time.time())),
        }

    return finish


def booking_jobs(ctx: Any, rng: random.Random, people: list[Any], now: datetime) -> list[Any]:
    """The Calendly deliveries for the plan (see the module docstring)."""
    key = signing_key(ctx)
    path = f"/hooks/calendly/{ctx.sources['calendly'][0].key}/"

    def post(intent: str, event: dict[str, Any], person: Any, *, carry_lead: bool = False) -> Any:
        finish = booking_finisher(event, key, ctx.business_slug, person, carry_lead=carry_lead)
        return Post(
            "calendly",
            intent,
            path,
            b"",
            {},
            expect=OK,
            event_provider="calendly",
            person=getattr(person, "number", None),
            prepare=finish,
        )

    bookers = [p for p in people if (p.phone or p.email) and not p.is_google_test]
    bookers = rng.sample(bookers, max(1, round(len(bookers) / 4))) if bookers else []
    jobs: list[Any] = []
    day = now.replace(hour=15, minute=0, second=0, microsecond=0)
    for n, person in enumerate(bookers):
        event_uri = f"{API}/scheduled_events/{uri_token(rng)}"
        uri = f"{event_uri}/invitees/{uri_token(rng)}"
        outcome = "no_show" if n % 4 == 1 else "cancel" if n % 4 == 2 else ""
        starts = now - timedelta(hours=3) if outcome == "no_show" else day + timedelta(days=rng.randint(1, 7))
        booked_at = now - timedelta(days=2) if outcome == "no_show" else now
        created = calendly_envelope(
            "invitee.created", calendly_invitee(uri, event_uri, person, starts, booked_at), booked_at
        )
        posts = [post(BOOKING, created, person, carry_lead=n % 2 == 0)]
        if n == 0:
            posts.append(
                Post(
                    "calendly",
                    DUPLICATE,
                    path,
                    expect=OK,
                    stores=STORES_SAME,
                    event_provider="calendly",
                    person=person.number,
                    repeat_previous=True,
                )
            )
        jobs.append(Job(BOOKING_PHASE, posts))
        if outcome == "cancel":
            cancellation = {
                "canceled_by": person.name,
                "reason": "Found another time slot elsewhere",
                "canceler_type": "invitee",
                "created_at": _iso(now),
            }
            invitee = calendly_invitee(
                uri, event_uri, person, starts, booked_at, status="canceled", cancellation=cancellation
            )
            jobs.append(
                Job(OUTCOME_PHASE, [post(CANCELLATION, calendly_envelope("invitee.canceled", invitee, now), person)])
            )
        elif outcome == "no_show":
            mark = {"uri": f"{API}/invitee_no_shows/{uri_token(rng)}", "created_at": _iso(now)}
            invitee = calendly_invitee(uri, event_uri, person, starts, booked_at, no_show=mark)
            jobs.append(
                Job(OUTCOME_PHASE, [post(NO_SHOW, calendly_envelope("invitee_no_show.created", invitee, now), person)])
            )

    stranger = _Stranger(f"walk.in.{uri_token(rng, 6).lower()}@example.org")
    event_uri = f"{API}/scheduled_events/{uri_token(rng)}"
    unknown = calendly_envelope(
        "invitee.created",
        calendly_invitee(f"{event_uri}/invitees/{uri_token(rng)}", event_uri, stranger, day + timedelta(days=3), now),
        now,
    )
    jobs.append(Job(BOOKING_PHASE, [post(UNMATCHED, unknown, stranger)]))
    forged = json.dumps(unknown, separators=(",", ":")).replace("walk.in", "forged").encode()
    header = {
        "Content-Type": "application/json",
        "Calendly-Webhook-Signature": calendly_signature("not-the-signing-key", forged, int(now.timestamp())),
    }
    jobs.append(
        Job(
            BOOKING_PHASE,
            [
                Post(
                    "calendly",
                    BAD_SIGNATURE,
                    path,
                    forged,
                    header,
                    expect=REFUSED,
                    stores=STORES_NONE,
                    event_provider="calendly",
                )
            ],
        )
    )
    return jobs


class _Stranger:
    """Somebody who books without ever having been a lead."""

    number = None
    phone = ""
    postal_code = "60601"
    request = "Thermostat replacement"
    name = "Walk In"

    def __init__(self, email: str) -> None:
        self.email = email
