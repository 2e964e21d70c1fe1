"""Whether a recorded call must first say that it is recorded.

Most US states let one party to a call record it; a few require the consent
of every party, which an announcement before the call is connected gives
the caller the chance to refuse (by hanging up). LeadOps announces when the
business or the caller may be in one of those states, and whenever it
cannot tell:

- the business's states are the business file's `calls: {states: [...]}`
  (`Business.call_states`): where it operates and takes calls. Left out,
  they are unknown, and every recorded call is announced;
- the caller's state is Twilio's `FromState` (or `CallerState`) for the
  number, else the state phonenumbers' geocoder names for its area code. A
  number is not where its owner is (a mobile number moves with its owner),
  so this only adds announcements: a withheld, foreign or unplaceable
  number is announced too.

This is a conservative default, not legal advice: a business that records
calls should confirm its own obligations.
"""

from __future__ import annotations

from collections.abc import Mapping

import phonenumbers

from crm.models import Business
from crm.us_states import STATE_CODES, US_STATE_NAMES

# The states whose wiretap laws require every party's consent to record a
# phone call, after the Reporters Committee for Freedom of the Press's
# "Reporter's Recording Guide" (rcfp.org/reporters-recording-guide) and
# Justia's 50-state survey of recording laws. Lists differ at the edges, and
# this one errs on inclusion: Oregon requires all parties only for in-person
# conversations (phone calls are one-party), Michigan's courts let a
# participant record, Nevada's all-party rule for phone calls comes from its
# supreme court, Connecticut's from civil liability, and Delaware's statutes
# conflict. Vermont has no statute and Hawaii is all-party only for a
# recording device in a private place: neither is listed.
ALL_PARTY_CONSENT_STATES = frozenset(
    {"CA", "CT", "DE", "FL", "IL", "MD", "MA", "MI", "MT", "NV", "NH", "OR", "PA", "WA"}
)


def caller_state(params: Mapping[str, str], number: str) -> str:
    """The US state of the caller's number ("" when unknown): Twilio's own
    geo parameter first, else the geocoder's place for the number."""
    for key in ("FromState", "CallerState"):
        code = str(params.get(key, "")).strip().upper()
        if code in STATE_CODES:
            return code
    try:
        parsed = phonenumbers.parse(number, None)
    except phonenumbers.NumberParseException:
        return ""
    if phonenumbers.region_code_for_number(parsed) != "US":
        return ""
    # Imported here: the geocoder's data takes seconds to load, and every
    # process would pay it at startup.
    from phonenumbers import geocoder

    place = geocoder.description_for_number(parsed, "en")  # "Chicago, IL" or "Oregon"
    tail = place.rsplit(", ", 1)[-1]
    return tail if tail in STATE_CODES else US_STATE_NAMES.get(place, "")


def recording_notice_reason(business: Business, params: Mapping[str, str], caller: str) -> str:
    """Why this recorded call must be announced, or "" when neither side is
    in an all-party-consent state as far as anyone can tell."""
    states = [str(s).upper() for s in business.call_states or []]
    if not states:
        return "the business's states are unknown"
    strict = sorted(set(states) & ALL_PARTY_CONSENT_STATES)
    if strict:
        return f"the business operates in {', '.join(strict)} (all-party consent)"
    state = caller_state(params, caller)
    if not state:
        return "the caller's state is unknown"
    if state in ALL_PARTY_CONSENT_STATES:
        return f"the caller's number is from {state} (all-party consent)"
    return ""
