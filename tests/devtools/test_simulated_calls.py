"""The simulator's Angi and CallRail builders (devtools/simulator/calls.py):
every post they plan is answered as they expect and stores what they say,
posted to the real endpoints, and the stored leads, calls and texts process."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from django.test import Client
from django.utils import timezone

import devtools.simulator.core  # noqa: F401 - the builders' base, loaded before them
from crm.models import Business, Call, InboundEvent, Lead, Message, Source
from devtools.simulator.base import STORES_FAILED, STORES_NEW, STORES_NONE, Post
from devtools.simulator.calls import AngiBuilder, CallRailBuilder
from devtools.simulator.core import Plan, SimContext, SourceInfo, people_make
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

ANGI_SECRET = "sim-angi-path-secret-0123456789"
CALLRAIL_KEY = "sim-callrail-signing-key"


@pytest.fixture
def context(business: Business) -> SimContext:
    Source.objects.create(business=business, key="angi", provider="angi", secret=ANGI_SECRET)
    Source.objects.create(business=business, key="callrail", provider="callrail", secret=CALLRAIL_KEY)
    return SimContext(
        business_slug=business.slug,
        business_name=business.name,
        region="US",
        sources={
            "angi": [SourceInfo("angi", "angi", ANGI_SECRET)],
            "callrail": [SourceInfo("callrail", "callrail", CALLRAIL_KEY)],
        },
    )


def send(post: Post) -> int:
    before = InboundEvent.objects.count()
    headers = {k: v for k, v in post.headers.items() if k != "Content-Type"}
    response = Client().post(
        post.path, data=post.body, content_type=post.headers.get("Content-Type", ""), headers=headers
    )
    assert response.status_code in post.expect, (post.intent, response.status_code, response.content)
    stored = InboundEvent.objects.count() - before
    if post.stores == STORES_NONE:
        assert stored == 0
    elif post.stores in (STORES_NEW, STORES_FAILED):
        assert stored == 1
        if post.stores == STORES_FAILED:
            assert InboundEvent.objects.order_by("-pk").values_list("status", flat=True)[0] == "failed"
    return response.status_code


def test_each_planned_post_is_answered_and_stored_as_its_builder_expects(context):
    rng = random.Random(7)
    plan = Plan(seed=7, people=[], jobs=[], builders=[], skipped={})
    people = people_make(rng, 3)
    at = timezone.now().astimezone(UTC).replace(microsecond=0)
    for cls in (AngiBuilder, CallRailBuilder):
        builder = cls(context, rng, plan)
        assert builder.unavailable() == ""
        jobs = [
            *builder.lead(people[0], at, 0, 0),
            *builder.lead(people[1], at, 0, 0),
            *builder.reply(people[0], at, 1),
            builder.malformed(at, 2),
            builder.bad_signature(people[2], at, 2),
        ]
        for job in jobs:
            for post in job.posts:
                send(post)
        retry = builder.duplicate(jobs[0])
        assert retry is not None and send(retry.posts[0]) == 200

    assert run_queued_events() == ["processed"] * 5  # two Angi leads, two calls, one text
    # Each person's Angi lead is the one their call joins: the same person and need.
    assert sorted(Lead.objects.values_list("touches__provider", flat=True)) == ["angi", "angi", "callrail", "callrail"]
    assert Call.objects.filter(provider_sid__startswith="CAL").count() == 2
    assert Message.objects.filter(direction="in", provider_sid__startswith="callrail:").count() == 1
    assert InboundEvent.objects.filter(status="failed").count() == 2


def test_the_same_seed_builds_the_same_bytes(context):
    at = datetime(2026, 3, 14, 15, 0, tzinfo=UTC)

    def bodies(seed: int) -> list[bytes]:
        rng = random.Random(seed)
        plan = Plan(seed=seed, people=[], jobs=[], builders=[], skipped={})
        person = people_make(random.Random(1), 1)[0]
        return [
            job.posts[0].body
            for cls in (AngiBuilder, CallRailBuilder)
            for job in cls(context, rng, plan).lead(person, at, 0, 0)
        ]

    assert bodies(3) == bodies(3) != bodies(4)
