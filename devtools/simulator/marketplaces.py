"""Thumbtack and Yelp webhook deliveries for `manage.py simulate`.

- `ThumbtackBuilder`: `/hooks/thumbtack/<key>/`, negotiations and their
  customers' messages with the source's Basic credentials
  (`basic_authorization`, the provider module's own). Some threads' first
  message comes before their negotiation, as Thumbtack may send it. Noise: a
  negotiation whose customer is not an object (200, stored failed) and last
  year's password (401).
- `YelpBuilder`: `/hooks/yelp/`, NEW_EVENT notifications with ids only (Yelp
  signs nothing); the server reads each lead and its events from
  YELP_API_URL, which `MarketplaceServer` (devtools/simulator/
  marketplace_api.py) serves once `yelp_publish(server, plan)` gave it the
  plan's leads. Noise: a body about our business whose updates are not a
  list (200, stored failed) and a notification about a business we do not
  hold (403).

Both build on the simulator's core (people, plans, `Builder`), which imports
this module after defining them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from agents.capture.providers.thumbtack import basic_authorization
from devtools.simulator.base import (
    BAD_SIGNATURE,
    LEAD,
    MALFORMED,
    REFUSED,
    REPLY,
    STORES_FAILED,
    STORES_NONE,
    UNREADABLE,
    Builder,
    Job,
    Person,
    Plan,
    SourceInfo,
    compact,
)
from devtools.simulator.marketplace_api import MarketplaceServer, iso

# --- the builders -------------------------------------------------------------------

THREAD_FOLLOW_UPS = (
    "Is tomorrow morning possible?",
    "Thanks! Do you charge for the visit?",
    "Gas shut-off is by the stairs, just so you know.",
    "We're home after 3 on weekdays.",
)


def _display_name(person: Person) -> str:
    # Both marketplaces show a last initial only.
    return f"{person.first_name} {person.last_name[:1]}."


class ThumbtackBuilder(Builder):
    """`/hooks/thumbtack/<key>/`: negotiations and their customers' messages,
    with the source's Basic credentials (its key and secret). Some threads'
    first message comes before their negotiation, as Thumbtack may send it."""

    name = source_provider = event_provider = "thumbtack"

    def unavailable(self) -> str:
        if not any(s.secret for s in self.ctx.sources.get(self.source_provider, [])):
            return "no active thumbtack source with a secret (the server refuses every delivery without one)"
        return ""

    def source(self) -> SourceInfo:
        return self.rng.choice([s for s in self.ctx.sources[self.source_provider] if s.secret])

    def _post(self, intent: str, source: SourceInfo, payload: dict[str, Any], password: str = "", **kw: Any) -> Any:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Thumbtack-Webhooks/4",
            "Authorization": basic_authorization(source.key, password or source.secret),
        }
        return self.post(intent, f"/hooks/thumbtack/{source.key}/", compact(payload), headers, **kw)

    def _negotiation(self, source: SourceInfo, person: Person, at: datetime, negotiation_id: str) -> dict[str, Any]:
        customer: dict[str, Any] = {"customerID": self.ids.digits(18), "displayName": _display_name(person)}
        if self.rng.random() < 0.6:  # shared only with the phone scope
            customer["phone"] = person.phone
        return {
            "webhookID": self.ids.digits(18),
            "eventType": "NegotiationCreatedV4",
            "data": {
                "negotiationID": negotiation_id,
                "createTime": iso(at),
                "business": {"businessID": str(source.config.get("business_id") or self.ids.digits(18))},
                "customer": customer,
                "request": {
                    "requestID": self.ids.digits(18),
                    "category": {"categoryID": self.ids.digits(18), "name": f"{person.service} Repair"},
                    "description": person.request,
                    "location": {
                        "city": person.area[1].title(),
                        "state": person.area[2],
                        "zipCode": person.postal_code,
                    },
                    "details": [{"question": "When do you need this done?", "answer": "As soon as possible"}],
                },
            },
        }

    def _message(self, negotiation: dict[str, Any], text: str, at: datetime) -> dict[str, Any]:
        data = negotiation["data"]
        return {
            "webhookID": negotiation["webhookID"],
            "eventType": "MessageCreatedV4",
            "data": {
                "messageID": self.ids.digits(18),
                "negotiationID": data["negotiationID"],
                "customer": {k: data["customer"][k] for k in ("customerID", "displayName")},
                "from": "Customer",
                "text": text,
                "attachments": [],
                "sentAt": iso(at),
            },
        }

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        source = self.source()
        negotiation = self._negotiation(source, person, at, self.ids.digits(18))
        self._threads = {**getattr(self, "_threads", {}), person.number: (source, negotiation)}
        posts = [self._post(LEAD, source, negotiation, person=person.number)]
        jobs = []
        if self.rng.random() < 0.3:
            early = self._message(negotiation, self.rng.choice(THREAD_FOLLOW_UPS), at + timedelta(seconds=30))
            # Thumbtack may send a thread's message before its negotiation: it waits for it.
            posts.insert(0, self._post(REPLY, source, early, person=person.number))
        elif self.rng.random() < 0.4:
            later = self._message(negotiation, self.rng.choice(THREAD_FOLLOW_UPS), at + timedelta(minutes=9))
            jobs.append(Job(phase + 2, [self._post(REPLY, source, later, person=person.number)]))
        return [Job(phase, posts), *jobs]

    def reply(self, person: Person, at: datetime, phase: int) -> list[Job]:
        held = getattr(self, "_threads", {}).get(person.number)
        if held is None:
            return []
        source, negotiation = held
        message = self._message(negotiation, self.rng.choice(THREAD_FOLLOW_UPS), at)
        return [Job(phase, [self._post(REPLY, source, message, person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        source = self.source()
        payload = {
            "eventType": "NegotiationCreatedV4",
            "data": {"negotiationID": self.ids.digits(18), "customer": "Casey R.", "request": {}},
        }
        return Job(phase, [self._post(MALFORMED, source, payload, expect=UNREADABLE, stores=STORES_FAILED)])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        source = self.source()
        payload = self._negotiation(source, stranger, at, self.ids.digits(18))
        post = self._post(BAD_SIGNATURE, source, payload, "last-years-password", expect=REFUSED, stores=STORES_NONE)
        return Job(phase, [post])


def yelp_published(plan: Plan) -> dict[str, Any]:
    """What the Yelp builder announced in `plan`: the leads (with their
    events) the stand-in must serve, and the tokens it must accept."""
    return vars(plan).setdefault("yelp", {"leads": {}, "tokens": set()})


def yelp_publish(server: MarketplaceServer, plan: Plan) -> None:
    """Serve on `server` every Yelp lead `plan` announces."""
    published = yelp_published(plan)
    for lead, events in published["leads"].values():
        server.yelp_lead(lead, events)
    server.tokens.update(published["tokens"])


class YelpBuilder(Builder):
    """`/hooks/yelp/`: NEW_EVENT notifications with ids only (Yelp signs
    nothing); the server reads each lead and its events from YELP_API_URL,
    which `MarketplaceServer` serves from the plan (`yelp_publish`)."""

    name = source_provider = event_provider = "yelp"

    def unavailable(self) -> str:
        if not self._sources():
            return "no active yelp source with a business_id and an access_token"
        return ""

    def _sources(self) -> list[SourceInfo]:
        return [
            s
            for s in self.ctx.sources.get(self.source_provider, [])
            if s.config.get("business_id") and s.config.get("access_token")
        ]

    def source(self) -> SourceInfo:
        return self.rng.choice(self._sources())

    def _notification(self, business_id: str, event_id: str, lead_id: str, at: datetime) -> bytes:
        update = {"event_type": "NEW_EVENT", "event_id": event_id, "lead_id": lead_id, "interaction_time": iso(at)}
        return compact(
            {
                "time": iso(at + timedelta(seconds=1)),
                "object": "business",
                "data": {"id": business_id, "updates": [update]},
            }
        )

    def _post(self, intent: str, body: bytes, **kw: Any) -> Any:
        headers = {"Content-Type": "application/json", "User-Agent": "Yelp-Webhooks"}
        return self.post(intent, "/hooks/yelp/", body, headers, **kw)

    def _event(self, text: str, at: datetime, person: Person) -> dict[str, Any]:
        event_id = self.ids.token(22)
        return {
            "cursor": self.ids.token(40),
            "event_content": {"fallback_text": text, "text": text},
            "event_type": "TEXT",
            "id": event_id,
            "time_created": iso(at),
            "user_display_name": _display_name(person),
            "user_type": "CONSUMER",
        }

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        source = self.source()
        business_id = str(source.config["business_id"])
        lead_id = self.ids.token(22)
        first = self._event(person.request, at, person)
        lead: dict[str, Any] = {
            "business_id": business_id,
            "id": lead_id,
            "conversation_id": self.ids.token(22),
            "time_created": iso(at),
            "last_event_time": iso(at),
            "user": {"display_name": _display_name(person)},
            "project": {
                "survey_answers": [{"question_text": "When do you need this?", "answer_text": ["As soon as possible"]}],
                "location": {"postal_code": person.postal_code},
                "additional_info": person.request,
                "job_names": [f"{person.service} Repair"],
            },
        }
        if self.rng.random() < 0.5:  # shared by the person on Yelp
            lead["phone_number"] = person.phone
        events = [first]
        jobs = [
            Job(
                phase,
                [self._post(LEAD, self._notification(business_id, first["id"], lead_id, at), person=person.number)],
            )
        ]
        if self.rng.random() < 0.4:
            later = self._event(self.rng.choice(THREAD_FOLLOW_UPS), at + timedelta(minutes=7), person)
            events.append(later)
            body = self._notification(business_id, later["id"], lead_id, at + timedelta(minutes=7))
            jobs.append(Job(phase + 2, [self._post(REPLY, body, person=person.number)]))
        published = yelp_published(self.plan)
        published["leads"][lead_id] = (lead, events)
        published["tokens"].add(str(source.config["access_token"]))
        return jobs

    def malformed(self, at: datetime, phase: int) -> Job:
        business_id = str(self.source().config["business_id"])
        body = compact({"object": "business", "data": {"id": business_id, "updates": "NEW_EVENT"}})
        return Job(phase, [self._post(MALFORMED, body, expect=UNREADABLE, stores=STORES_FAILED)])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        # Unsigned: what is refused is a notification about a business we do not hold.
        body = self._notification("not-" + self.ids.token(18), self.ids.token(22), self.ids.token(22), at)
        return Job(phase, [self._post(BAD_SIGNATURE, body, expect=REFUSED, stores=STORES_NONE)])
