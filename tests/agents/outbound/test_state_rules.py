"""State rules on marketing texts: each state's hours, days and holidays, its
cap, the state by area code and by ZIP code (the stricter wins), and the
business's own windows, which only narrow."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agents.outbound.gate import message_gate, message_send
from agents.outbound.state_rules import CHRISTMAS, MEMORIAL_DAY, MLK_DAY, NEW_YEAR, STATE_RULES, THANKSGIVING
from crm.models import Message, Receipt
from crm.services.consent import consent_record
from crm.zip_states import zip_state
from leadops.workspace.selectors import BLOCKED_WORDS
from leadops.workspace.templatetags.workspace import verdict
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

EASTERN, CENTRAL, PACIFIC = ZoneInfo("America/New_York"), ZoneInfo("America/Chicago"), ZoneInfo("America/Los_Angeles")
WEDNESDAY, SUNDAY = date(2026, 12, 2), date(2026, 12, 6)
CONSENTED = datetime(2026, 11, 1, 12, 0, tzinfo=EASTERN)

PHONES = {
    "FL": ("+13055550147", EASTERN),
    "OK": ("+14055550147", CENTRAL),
    "MD": ("+14105550147", EASTERN),
    "TX": ("+15125550147", CENTRAL),
    "WA": ("+12065550147", PACIFIC),
    "AL": ("+12055550147", CENTRAL),
    "LA": ("+15045550147", CENTRAL),
    "MS": ("+16015550147", CENTRAL),
    "CT": ("+12035550147", EASTERN),
    "NY": ("+12125550147", EASTERN),
}


def at(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)


_people = iter(range(100, 200))  # 555-0100 to 555-0199: numbers kept for fiction


def lead_in(business, state: str, postal_code: str = "", consented: datetime = CONSENTED):
    """A lead with a number in `state`'s area code (another person each time)."""
    lead = lead_create(business, phone=PHONES[state][0][:-4] + f"0{next(_people)}")
    consent_record(
        contact_point=lead.contact.points.get(),
        channel="sms",
        granted=True,
        basis="form_disclosure",
        actor="test",
        at=consented,
    )
    if postal_code:
        lead.contact.postal_code = postal_code
        lead.contact.save(update_fields=["postal_code"])
    return lead


_keys = iter(range(10**6))


def send(lead, now: datetime, *, automated: bool = True) -> Message:
    return message_send(
        lead=lead,
        channel="sms",
        body="Still thinking about the furnace? We have a slot on Friday.",
        actor="agent:test",
        idempotency_key=f"state-{next(_keys)}",
        automated=automated,
        now=now,
    )


# state, (local hour, minute) inside its window on a Wednesday, one outside,
# and when the window opens after the one outside (day offset, hour).
WINDOWS = [
    pytest.param("FL", (19, 30), (20, 30), (1, 8), id="FL 08-20"),
    pytest.param("OK", (19, 30), (20, 30), (1, 8), id="OK 08-20"),
    pytest.param("MD", (19, 30), (20, 30), (1, 8), id="MD 08-20"),
    pytest.param("WA", (19, 30), (20, 30), (1, 8), id="WA 08-20"),
    pytest.param("AL", (19, 30), (20, 30), (1, 8), id="AL 08-20"),
    pytest.param("LA", (19, 30), (20, 30), (1, 8), id="LA 08-20"),
    pytest.param("MS", (19, 30), (20, 30), (1, 8), id="MS 08-20"),
    pytest.param("TX", (20, 30), (8, 30), (0, 9), id="TX 09-21"),
    pytest.param("CT", (19, 30), (8, 30), (0, 9), id="CT 09-20"),
    pytest.param("NY", (20, 30), (21, 30), (1, 8), id="no state rule: the business's 08-21"),
]


@pytest.mark.parametrize(("state", "inside", "outside", "opens"), WINDOWS)
def test_each_state_keeps_its_own_hours(business, state, inside, outside, opens) -> None:
    zone = PHONES[state][1]
    lead = lead_in(business, state)
    assert send(lead, at(WEDNESDAY, inside[0], inside[1], zone)).status == "dry_run"
    late = send(lead, at(WEDNESDAY, outside[0], outside[1], zone))
    assert late.status == "deferred"
    assert late.deferred_until == at(WEDNESDAY + timedelta(days=opens[0]), opens[1], 0, zone)
    receipt = Receipt.objects.get(subject=late.public_id, action="message.deferred")
    assert receipt.reason.startswith("quiet_hours")


# A day or holiday with no texts (local noon), and when they may go again.
CLOSED_DAYS = [
    pytest.param("AL", SUNDAY, (SUNDAY + timedelta(days=1), 8), id="AL Sunday"),
    pytest.param("LA", SUNDAY, (SUNDAY + timedelta(days=1), 8), id="LA Sunday"),
    pytest.param("MS", SUNDAY, (SUNDAY + timedelta(days=1), 8), id="MS Sunday"),
    pytest.param("TX", SUNDAY, (SUNDAY, 12), id="TX Sunday morning"),
    pytest.param("AL", date(2026, 12, 25), (date(2026, 12, 26), 8), id="AL Christmas"),
    pytest.param("LA", date(2026, 12, 25), (date(2026, 12, 26), 8), id="LA Christmas"),
    # Thanksgiving (Thursday 26 November 2026), then Friday.
    pytest.param("AL", date(2026, 11, 26), (date(2026, 11, 27), 8), id="AL Thanksgiving"),
    # New Year's Day 2028 is a Saturday, observed Friday 31 December 2027:
    # both closed, then Sunday (no texts in Alabama either): Monday.
    pytest.param("AL", date(2027, 12, 31), (date(2028, 1, 3), 8), id="AL New Year observed"),
]


@pytest.mark.parametrize(("state", "day", "opens"), CLOSED_DAYS)
def test_a_state_without_texts_on_a_day_defers_to_its_next_open_day(business, state, day, opens) -> None:
    zone = PHONES[state][1]
    morning = (10, 0) if state == "TX" else (12, 0)
    lead = lead_in(business, state, consented=at(day, 8, 0, zone) - timedelta(days=30))
    message = send(lead, at(day, *morning, zone))
    assert (message.status, message.deferred_until) == ("deferred", at(opens[0], opens[1], 0, zone))


@pytest.mark.parametrize(("state", "day"), [("AL", SUNDAY), ("LA", date(2026, 12, 25)), ("AL", date(2026, 11, 26))])
def test_a_person_answering_on_a_closed_day_is_not_solicitation(business, state, day) -> None:
    """The Sunday and holiday bans are on solicitation: a setter answering a
    customer who wrote goes, within the state's hours; the automated
    follow-up the same minute still waits."""
    zone = PHONES[state][1]
    lead = lead_in(business, state, consented=at(day, 8, 0, zone) - timedelta(days=30))
    assert send(lead, at(day, 12, 0, zone), automated=False).status == "dry_run"
    assert send(lead, at(day, 12, 0, zone)).status == "deferred"
    late = send(lead, at(day, 20, 30, zone), automated=False)  # the hours still hold for a person
    assert late.status == "deferred"


@pytest.mark.parametrize(
    ("state", "day"),
    [
        pytest.param("MS", date(2026, 12, 25), id="MS texts on Christmas (its holiday ban was repealed)"),
        pytest.param("FL", SUNDAY, id="FL texts on Sunday"),
        pytest.param("NY", date(2026, 12, 25), id="NY texts on Christmas"),
    ],
)
def test_states_without_a_day_ban_text_that_day(business, state, day) -> None:
    assert send(lead_in(business, state), at(day, 12, 0, PHONES[state][1])).status == "dry_run"


@pytest.mark.parametrize("state", ["FL", "OK", "MD"])
def test_a_fourth_marketing_text_in_24_hours_waits_for_the_cap_to_free(business, state) -> None:
    business.max_texts_per_day = 10  # the business's own cap out of the way
    business.save(update_fields=["max_texts_per_day"])
    zone = PHONES[state][1]
    lead = lead_in(business, state)
    first = at(WEDNESDAY, 9, 0, zone)
    assert [send(lead, first + timedelta(hours=h)).status for h in range(3)] == ["dry_run"] * 3
    fourth = send(lead, first + timedelta(hours=3))
    assert (fourth.status, fourth.block_reason) == ("deferred", "state_cap")
    # The thread says why it waits: the state's cap, not quiet hours.
    said = verdict(fourth)
    assert (said["label"], said["reason"]) == ("Deferred", BLOCKED_WORDS["state_cap"])
    assert said["until"] == first + timedelta(hours=24)
    assert fourth.deferred_until == first + timedelta(hours=24)  # when the first is 24 hours old
    receipt = Receipt.objects.get(subject=fourth.public_id, action="message.deferred")
    assert receipt.reason.startswith(f"state_cap: {state}: at most 3 in 24 hours")
    # Once the cap frees, the deferred text goes.
    went = message_gate(fourth, now=first + timedelta(hours=24, minutes=1))
    assert (went.status, went.block_reason) == ("dry_run", "")
    # A person's own reply is not capped (it counts towards the cap, though).
    assert send(lead, first + timedelta(hours=24, minutes=2), automated=False).status == "dry_run"
    assert send(lead, first + timedelta(hours=24, minutes=3)).status == "deferred"


def test_states_without_a_cap_leave_it_to_the_business(business) -> None:
    business.max_texts_per_day = 10
    business.save(update_fields=["max_texts_per_day"])
    lead = lead_in(business, "TX")
    first = at(WEDNESDAY, 10, 0, CENTRAL)
    assert [send(lead, first + timedelta(hours=h)).status for h in range(5)] == ["dry_run"] * 5


def test_an_area_code_and_a_zip_in_different_states_get_both_rules(business) -> None:
    # A New York number, a Miami address: Florida's 20:00 applies.
    miami = lead_in(business, "NY", postal_code="33101")
    assert send(miami, at(WEDNESDAY, 20, 30, EASTERN)).status == "deferred"
    assert send(lead_in(business, "NY"), at(WEDNESDAY, 20, 30, EASTERN)).status == "dry_run"
    # A Florida number, a Texas address: Florida ends at 20:00 Eastern, Texas
    # starts at 09:00 on the Texan's clock — Mountain time in El Paso, the
    # latest of Texas's zones, so 11:00 Eastern: the stricter of each.
    texan = lead_in(business, "FL", postal_code="78701-1234")
    evening = send(texan, at(WEDNESDAY, 20, 30, EASTERN))
    assert evening.deferred_until == at(WEDNESDAY + timedelta(days=1), 11, 0, EASTERN)
    assert send(texan, at(WEDNESDAY, 10, 30, EASTERN)).deferred_until == at(WEDNESDAY, 11, 0, EASTERN)
    assert send(texan, at(WEDNESDAY, 11, 0, EASTERN)).status == "dry_run"
    # The ZIP's state brings its cap too.
    business.max_texts_per_day = 10
    business.save(update_fields=["max_texts_per_day"])
    first = at(WEDNESDAY + timedelta(days=2), 10, 0, EASTERN)
    statuses = [send(miami, first + timedelta(hours=h)).status for h in range(4)]
    assert statuses == ["dry_run", "dry_run", "dry_run", "deferred"]


def test_the_business_window_for_a_state_only_narrows_it(business) -> None:
    business.quiet_hours_by_state = {"FL": "07:00-22:00", "TX": "10:00-17:00"}
    business.save(update_fields=["quiet_hours_by_state"])
    # Wider than Florida's law: the law stands.
    assert send(lead_in(business, "FL"), at(WEDNESDAY, 20, 30, EASTERN)).status == "deferred"
    assert send(lead_in(business, "FL"), at(WEDNESDAY, 7, 30, EASTERN)).status == "deferred"
    # Narrower than Texas's: the business's stands, and Sunday's noon still holds.
    texas = lead_in(business, "TX")
    assert send(texas, at(WEDNESDAY, 9, 30, CENTRAL)).deferred_until == at(WEDNESDAY, 10, 0, CENTRAL)
    assert send(texas, at(WEDNESDAY, 17, 30, CENTRAL)).status == "deferred"
    assert send(texas, at(SUNDAY, 10, 30, CENTRAL)).deferred_until == at(SUNDAY, 12, 0, CENTRAL)


def test_holidays_fall_on_their_rule_days() -> None:
    assert MLK_DAY.on(2027) == date(2027, 1, 18)
    assert MEMORIAL_DAY.on(2026) == date(2026, 5, 25)
    assert THANKSGIVING.on(2026) == date(2026, 11, 26)
    assert CHRISTMAS.closes(date(2027, 12, 24))  # Christmas 2027 is a Saturday: observed Friday
    assert NEW_YEAR.closes(date(2027, 12, 31)) and not NEW_YEAR.closes(date(2027, 12, 30))


def test_every_rule_names_its_source_and_when_it_was_checked() -> None:
    for rule in STATE_RULES.values():
        assert rule.source and rule.checked and len(rule.week) == 7
        assert rule.confirmed or "not confirmed" in rule.note.lower()


@pytest.mark.parametrize(
    ("postal_code", "state"),
    [
        ("33101", "FL"),
        ("78701-1234", "TX"),
        ("73301", "TX"),  # Austin's IRS prefix inside Oklahoma's run
        ("73102", "OK"),
        ("21201", "MD"),
        ("98101", "WA"),
        ("05501", "MA"),
        ("10001", "NY"),
        ("09001", ""),  # military mail
        ("SW1A 1AA", ""),
        ("", ""),
    ],
)
def test_a_zip_code_names_its_state(postal_code, state) -> None:
    assert zip_state(postal_code) == state
