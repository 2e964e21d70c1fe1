"""One need, one lead, whatever order a person's touches arrive in.

The racing tests run each capture in its own thread with its own database
connection. To force an arrival order without touching our code, the test
holds the identity lock of the phone number itself, lets the threads queue on
it one by one (PostgreSQL grants a lock to its waiters in queue order) and
then lets go.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from agents.capture.base import Capture
from agents.capture.identity import capture_apply
from crm.models import Business, Lead, Receipt, ServiceLine
from crm.services import lead_sync

PHONE = "+12125550147"


def lines(business: Business) -> None:
    ServiceLine.objects.create(business=business, slug="hvac", name="HVAC", keywords=["furnace"])
    ServiceLine.objects.create(business=business, slug="plumbing", name="Plumbing", keywords=["leak"])


def touch(name: str, text: str, at: datetime) -> Capture:
    return Capture(channel="form", occurred_at=at, phones=[PHONE], request_text=text, answers={"which": name})


def the_three(at: dict[str, int]) -> dict[str, Capture]:
    """An answer with no service words, a furnace and a leak, `at` seconds
    after a common start."""
    start = timezone.now() - timedelta(minutes=5)
    texts = {"unknown": "Please call me back", "hvac": "Furnace is out", "plumbing": "A leak under the sink"}
    return {name: touch(name, texts[name], start + timedelta(seconds=at[name])) for name in texts}


def leads_now() -> set[tuple[str | None, frozenset[str]]]:
    """The person's open leads: each one's service line and its touches."""
    return {
        (
            lead.service_line.slug if lead.service_line else None,
            frozenset(t.answers["which"] for t in lead.touches.all()),
        )
        for lead in Lead.objects.exclude(stage__in=["lost"]).select_related("service_line")
    }


def _waiting_on_advisory_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return int(cursor.fetchone()[0])


def in_order(business: Business, calls: Sequence[Callable[[], object]]) -> None:
    """Run `calls` in threads that reach the identity lock in the given order."""
    key = f"identity:{business.pk}:phone:{PHONE}"
    holder = connections.create_connection("default")

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        try:
            with holder.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
            futures = []
            for queued, call in enumerate(calls, start=1):
                futures.append(pool.submit(run, call))
                deadline = time.monotonic() + 20
                while _waiting_on_advisory_locks() < queued:
                    assert time.monotonic() < deadline, "a capture never queued on the identity lock"
                    time.sleep(0.01)
        finally:
            holder.close()  # ends its transaction: the queued captures run in turn
        for future in futures:
            future.result()


def race(calls: Sequence[Callable[[], object]]) -> None:
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=30)
            call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        for future in [pool.submit(run, call) for call in calls]:
            future.result()


def apply(business: Business, capture: Capture) -> Callable[[], object]:
    return lambda: capture_apply(business=business, capture=capture)


# The furnace was heard first, then the answer with no service words, then the leak.
FURNACE_ANSWER_LEAK = {"hvac": 0, "unknown": 1, "plumbing": 2}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("order", list(itertools.permutations(["unknown", "hvac", "plumbing"])), ids="-".join)
def test_every_arrival_order_of_three_racing_touches_gives_the_same_leads(business, order):
    lines(business)
    captures = the_three(FURNACE_ANSWER_LEAK)
    in_order(business, [apply(business, captures[name]) for name in order])
    # The answer belongs to the newest need heard before it was given.
    assert leads_now() == {("hvac", frozenset({"hvac", "unknown"})), ("plumbing", frozenset({"plumbing"}))}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "at, expected",
    [
        # Given before either need was heard: it belongs to the first one heard.
        ({"unknown": 0, "hvac": 1, "plumbing": 2}, {("hvac", ("hvac", "unknown")), ("plumbing", ("plumbing",))}),
        # Given after both: it belongs to the newest.
        ({"hvac": 0, "plumbing": 1, "unknown": 2}, {("hvac", ("hvac",)), ("plumbing", ("plumbing", "unknown"))}),
    ],
    ids=["answer-first", "answer-last"],
)
def test_three_touches_released_together_by_a_barrier_give_the_same_leads_in_every_round(business, at, expected):
    lines(business)
    want = {(line, frozenset(names)) for line, names in expected}
    shuffle = random.Random(12)
    for _ in range(3):
        captures = the_three(at)
        calls = [apply(business, captures[name]) for name in captures]
        shuffle.shuffle(calls)
        race(calls)
        assert leads_now() == want
        # The next round is a new need: this round's leads are closed.
        for lead in Lead.objects.exclude(stage="lost"):
            lead_sync.lead_transition(lead, "lost", actor="sam", reason="next round of the test")


# Service level: what an unknown-line touch joins.


@pytest.mark.django_db
def test_an_unknown_line_touch_with_no_open_lead_opens_one(business):
    lines(business)
    applied = capture_apply(business=business, capture=touch("unknown", "Call me", timezone.now()))
    assert applied.created_lead and applied.lead.service_line is None


@pytest.mark.django_db
def test_an_unknown_line_touch_joins_the_one_open_lead_whatever_its_line(business):
    lines(business)
    now = timezone.now()
    furnace = capture_apply(business=business, capture=touch("hvac", "Furnace is out", now - timedelta(minutes=1)))
    answer = capture_apply(business=business, capture=touch("unknown", "Call me", now))
    assert answer.lead == furnace.lead and not answer.created_lead
    assert Lead.objects.count() == 1


@pytest.mark.django_db
def test_an_unknown_line_touch_joins_the_newest_of_two_open_leads_and_the_receipt_says_so(business):
    lines(business)
    now = timezone.now()
    capture_apply(business=business, capture=touch("hvac", "Furnace is out", now - timedelta(minutes=2)))
    leak = capture_apply(business=business, capture=touch("plumbing", "A leak", now - timedelta(minutes=1)))
    answer = capture_apply(business=business, capture=touch("unknown", "Call me", now))
    assert answer.lead == leak.lead and Lead.objects.count() == 2
    receipt = Receipt.objects.get(action="lead.touch_added", subject=answer.touch.public_id)
    assert "newest of 2 open leads" in receipt.reason
    assert receipt.after["open_leads"] == 2


@pytest.mark.django_db
def test_a_named_line_touch_after_an_unknown_line_lead_joins_it_and_sets_its_line(business):
    lines(business)
    now = timezone.now()
    answer = capture_apply(business=business, capture=touch("unknown", "Call me", now - timedelta(minutes=1)))
    furnace = capture_apply(business=business, capture=touch("hvac", "Furnace is out", now))
    assert furnace.lead == answer.lead and not furnace.created_lead
    assert furnace.lead.service_line.slug == "hvac" and Lead.objects.count() == 1
    receipt = Receipt.objects.get(action="lead.service_line_set", lead=answer.lead)
    assert receipt.after == {"service_line": "hvac"}


@pytest.mark.django_db
def test_a_touch_that_arrives_late_moves_an_unknown_line_touch_to_the_need_heard_before_it(business):
    lines(business)
    captures = the_three(FURNACE_ANSWER_LEAK)
    # The leak and the answer arrive first; the furnace, heard first, last.
    for name in ("plumbing", "unknown", "hvac"):
        capture_apply(business=business, capture=captures[name])
    assert leads_now() == {("hvac", frozenset({"hvac", "unknown"})), ("plumbing", frozenset({"plumbing"}))}
    moved = Receipt.objects.get(action="lead.touch_moved")
    assert moved.lead.service_line.slug == "hvac"
    assert moved.before["lead"] == Lead.objects.get(service_line__slug="plumbing").public_id


@pytest.mark.django_db(transaction=True)
def test_touches_of_one_person_through_different_points_still_end_on_one_lead(business):
    lines(business)
    known = capture_apply(
        business=business,
        capture=Capture(channel="form", occurred_at=timezone.now(), phones=[PHONE], emails=["a@x.com"]),
    )
    for round_ in range(5):
        lead_sync.lead_transition(known.lead, "lost", actor="sam", reason="a new need each round")
        at = timezone.now()
        by_phone = touch("unknown", "Call me", at)
        by_email = Capture(
            channel="form", occurred_at=at, emails=["a@x.com"], request_text="Furnace", answers={"which": "hvac"}
        )
        # Neither shares a point with the other: only the contact's lock keeps them from both opening a lead.
        race([apply(business, by_phone), apply(business, by_email)])
        assert leads_now() == {("hvac", frozenset({"hvac", "unknown"}))}, round_
        known.lead = Lead.objects.exclude(stage="lost").get()
