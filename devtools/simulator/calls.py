"""Angi lead pushes and CallRail calls and texts for `manage.py simulate`.

- `AngiBuilder`: `/hooks/angi/<key>/<secret>/`, one lead per JSON body, the
  way Angi's feed posts it (no signature: the URL carries the source's
  secret). A lead may be answered 429 when a run sends more than the source's
  hourly budget (`rate_limit_per_hour`). Noise: a body cut off mid-send (400,
  stored failed) and a post with last year's secret (404, as for a key that
  does not exist).
- `CallRailBuilder`: `/hooks/callrail/<key>/`, signed with the company's
  signing key by `callrail_signature`, the provider module's own signer. A
  person calls a tracking number: mostly nobody answers and they leave a
  voicemail (recording and transcript attached), sometimes someone picks up;
  a reply is a text to the same tracking number. Noise: a signed body cut
  off mid-send (400, stored failed) and one signed with an old key (401).

Both build on the simulator's core (people, plans, `Builder`), which imports
this module after defining them.
"""

from __future__ import annotations

import json
import string
from datetime import datetime, timedelta
from typing import Any

from agents.capture.providers.callrail import callrail_signature
from devtools.simulator.base import (
    BAD_SIGNATURE,
    LEAD,
    MALFORMED,
    OK,
    REFUSED,
    REPLY,
    STORES_FAILED,
    STORES_NONE,
    Builder,
    Job,
    Person,
    Post,
    SourceInfo,
)

RATE_LIMITED = 429
OLD_SECRET = "rotated-out-secret-from-last-year"  # noqa: S105 - a wrong secret, meant to be refused
ANGI_HEADERS = {
    # Angi's feed sends these two and no User-Agent.
    "Accept": "text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2",
    "Content-Type": "application/json",
}
ANGI_TASKS = {
    "Heating": "Furnace or Forced Air Heating System - Repair or Service",
    "Cooling": "Central Air Conditioning - Repair or Service",
    "HVAC": "Heating and Cooling Systems - Install or Replace",
    "Plumbing": "Plumbing Pipes and Fixtures - Repair",
}
ANGI_INTERVIEW = (
    ("Request stage", ("Ready to hire", "Planning and budgeting")),
    ("Desired completion date", ("Urgent (1-2 days)", "Within 1 week", "Timing is flexible")),
    ("Property type", ("Home/Residence", "Condominium")),
)
# A CallRail tracking number of the fictional 555-01xx range, toll free so no
# simulated person (local numbers only) ever has it.
TRACKING_NUMBER = "+18885550142"
TEXTS = (
    "Hi, I just left a voicemail about my furnace, any chance someone can come today?",
    "Following up on my call: tomorrow morning works for me",
    "Can you text me a price for a diagnostic visit?",
)
CALLRAIL_SOURCES = (
    ("Google Ads", "CPC", "Furnace Repair - Chicago", "furnace repair near me"),
    ("Google Organic", "organic", "", ""),
    ("Yelp", "referral", "", ""),
    ("Direct", "direct", "", ""),
)


def compact(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


class AngiBuilder(Builder):
    """`/hooks/angi/<key>/<secret>/`: Angi's lead feed, one lead per post."""

    name = source_provider = event_provider = "angi"

    def _path(self, source: SourceInfo, secret: str = "") -> str:
        return f"/hooks/angi/{source.key}/{secret or source.secret}/"

    def _lead(self, person: Person, at: datetime) -> dict[str, Any]:
        digits = person.phone.removeprefix("+1")
        task = ANGI_TASKS.get(person.service, "Heating and Cooling Systems - Repair")
        street = f"{self.rng.randint(100, 9899)} W {self.rng.choice(('Larkspur', 'Belmont', 'Addison', 'Foster'))} Ave"
        return {
            "leadOid": int(self.ids.digits(9)),
            "srOid": int(self.ids.digits(9)),
            "taskOid": int(self.ids.digits(5)),
            "taskName": task,
            "leadType": "Lead",
            "matchType": self.rng.choice(("Exact", "Market")),
            "leadDescription": "Standard",
            "contactStatus": "Not Contacted",
            "fee": round(self.rng.uniform(18, 75), 2),
            "spCompanyName": self.ctx.business_name,
            "name": person.name,
            "firstName": person.first_name,
            "lastName": person.last_name,
            "address": {"addressFirstLine": street, "city": "Chicago", "state": "IL", "zip": person.postal_code},
            "city": "Chicago",
            "stateProvince": "IL",
            "postalCode": person.postal_code,
            "primaryPhone": digits,
            "phoneExt": "",
            "email": person.email,
            "comments": person.request,
            "interview": [{"question": q, "answer": self.rng.choice(answers)} for q, answers in ANGI_INTERVIEW],
            "createDate": at.isoformat(timespec="seconds"),
        }

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        source = self.source()
        body = compact(self._lead(person, at))
        # Over the source's hourly budget a lead is refused, not stored.
        post = self.post(
            LEAD, self._path(source), body, dict(ANGI_HEADERS), expect=OK | {RATE_LIMITED}, person=person.number
        )
        return [Job(phase, [post])]

    def malformed(self, at: datetime, phase: int) -> Job:
        source = self.source()
        body = b'{"leadOid":' + self.ids.digits(9).encode() + b',"firstName":"Casey","primaryPhone":"31255'
        post = self.post(
            MALFORMED, self._path(source), body, dict(ANGI_HEADERS), expect=frozenset({400}), stores=STORES_FAILED
        )
        return Job(phase, [post])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        source = self.source()
        body = compact(self._lead(stranger, at))
        path = self._path(source, secret=OLD_SECRET)
        post = self.post(BAD_SIGNATURE, path, body, dict(ANGI_HEADERS), expect=frozenset({404}), stores=STORES_NONE)
        return Job(phase, [post])


class CallRailBuilder(Builder):
    """`/hooks/callrail/<key>/`: post-call webhooks and texts to a tracking number."""

    name = source_provider = event_provider = "callrail"

    def _post(self, intent: str, body: bytes, key: str = "", **kw: Any) -> Post:
        source = self.source()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "CallRail Webhooks",
            "Signature": callrail_signature(key or source.secret, body),
        }
        return self.post(intent, f"/hooks/callrail/{source.key}/", body, headers, **kw)

    def _tracking(self) -> str:
        return str(self.source().config.get("tracking_number") or TRACKING_NUMBER)

    def _call(self, person: Person, at: datetime) -> dict[str, Any]:
        rid = "CAL" + self.ids.sid("")
        answered = self.rng.random() < 0.3
        duration = self.rng.randint(45, 420) if answered else self.rng.randint(18, 60)
        origin, medium, campaign, keywords = self.rng.choice(CALLRAIL_SOURCES)
        paid = medium == "CPC"
        voicemail = not answered
        call: dict[str, Any] = {
            "resource_id": rid,
            "company_resource_id": "COM" + self.ids.sid(""),
            "direction": "inbound",
            "call_type": "inbound" if answered else "voicemail",
            "answered": answered,
            "voicemail": voicemail,
            "first_call": True,
            "duration": duration,
            "start_time": at.isoformat(timespec="milliseconds"),
            "created_at": at.isoformat(timespec="milliseconds"),
            "customer_name": person.name.upper() if self.rng.random() < 0.5 else "WIRELESS CALLER",
            "customer_phone_number": person.phone,
            "customer_city": person.area[1].title(),
            "customer_state": person.area[2],
            "customer_country": "US",
            "tracking_phone_number": self._tracking(),
            "source": origin,
            "medium": medium,
            "campaign": campaign or None,
            "keywords": keywords or None,
            "landing_page_url": f"https://{self.ctx.business_slug}.example/" + ("furnace-repair" if paid else ""),
            "gclid": self.ids.token(40) if paid else None,
            "utm_source": "google" if paid else None,
            "utm_medium": "cpc" if paid else None,
            "utm_campaign": "furnace-fall" if paid else None,
        }
        player = f"https://app.callrail.com/calls/{rid}/recording?access_key={self.ids.token(20, string.hexdigits)}"
        call["recording_player"] = player
        call["recording"] = f"https://api.callrail.com/v3/a/ACC{self.ids.sid('')}/calls/{rid}/recording.json"
        if voicemail:
            call["transcription"] = (
                f"Hi, this is {person.first_name}. {person.request}. Please call me back at this number."
            )
        return call

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        body = compact(self._call(person, at))
        return [Job(phase, [self._post(LEAD, body, person=person.number)])]

    def reply(self, person: Person, at: datetime, phase: int) -> list[Job]:
        text = {
            "resource_id": "SMS" + self.ids.sid(""),
            "thread_resource_id": "SMT" + self.ids.sid(""),
            "source_number": person.phone,
            "destination_number": self._tracking(),
            "content": self.rng.choice(TEXTS),
            "created_at": (at + timedelta(minutes=2)).isoformat(timespec="milliseconds"),
        }
        return [Job(phase, [self._post(REPLY, compact(text), person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        body = b'{"resource_id":"CAL' + self.ids.sid("").encode() + b'","answered":false,"customer_phone_n'
        return Job(phase, [self._post(MALFORMED, body, expect=frozenset({400}), stores=STORES_FAILED)])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        body = compact(self._call(stranger, at))
        return Job(
            phase, [self._post(BAD_SIGNATURE, body, key="an-old-signing-key", expect=REFUSED, stores=STORES_NONE)]
        )
