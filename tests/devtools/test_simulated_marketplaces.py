"""The simulator's Thumbtack and Yelp builders (devtools/simulator/marketplaces.py):
every post they plan is answered as they expect and stores what they say,
posted to the real endpoints, and the stored leads and messages process
(Yelp's read back from the stand-in API the plan's leads are published on)."""

from __future__ import annotations

import random
from datetime import UTC, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

import devtools.simulator.core  # noqa: F401 - the builders' base, loaded before them
from crm.models import Business, InboundEvent, Lead, Message, Source
from devtools.simulator.base import STORES_FAILED, STORES_NEW, STORES_NONE, Post
from devtools.simulator.core import Plan, SimContext, SourceInfo, people_make
from devtools.simulator.marketplace_api import marketplaces_running
from devtools.simulator.marketplaces import ThumbtackBuilder, YelpBuilder, yelp_publish
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

TT_SECRET = "sim-thumbtack-password-0123456789"
YELP_TOKEN = "sim-yelp-token"
YELP_BUSINESS = "SimYelpBusiness0000001"


@pytest.fixture
def context(business: Business) -> SimContext:
    Source.objects.create(business=business, key="thumbtack", provider="thumbtack", secret=TT_SECRET)
    Source.objects.create(
        business=business, key="yelp", provider="yelp", page_token=YELP_TOKEN, config={"business_id": YELP_BUSINESS}
    )
    return SimContext(
        business_slug=business.slug,
        business_name=business.name,
        region="US",
        sources={
            "thumbtack": [SourceInfo("thumbtack", "thumbtack", TT_SECRET)],
            "yelp": [SourceInfo("yelp", "yelp", "", {"business_id": YELP_BUSINESS, "access_token": YELP_TOKEN})],
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
            last = InboundEvent.objects.order_by("-pk").first()
            assert last is not None and last.status == "failed"
    return response.status_code


def test_each_planned_post_is_answered_and_stored_as_its_builder_expects(context: SimContext, settings: Any) -> None:
    rng = random.Random(11)
    plan = Plan(seed=11, people=[], jobs=[], builders=[], skipped={})
    people = people_make(rng, 5)
    at = timezone.now().astimezone(UTC).replace(microsecond=0) - timedelta(minutes=30)
    jobs = []
    for cls in (ThumbtackBuilder, YelpBuilder):
        builder = cls(context, rng, plan)
        assert builder.unavailable() == ""
        leads = [job for person in people[:2] for job in builder.lead(person, at, 0, 0)]
        jobs += [*leads, *builder.reply(people[0], at + timedelta(minutes=20), 3)]
        jobs += [builder.malformed(at, 2), builder.bad_signature(people[4], at, 2)]
        retry = builder.duplicate(leads[0])
        assert retry is not None
        jobs.append(retry)
    with marketplaces_running(settings) as server:
        yelp_publish(server, plan)
        for job in sorted(jobs, key=lambda j: j.phase):
            for post in job.posts:
                send(post)
        for _ in range(3):  # a thread's early message waits for its negotiation, then is due
            run_queued_events()

    assert Lead.objects.filter(touches__provider="thumbtack").distinct().count() == 2
    assert Lead.objects.filter(touches__provider="yelp").distinct().count() == 2
    assert not InboundEvent.objects.filter(status="received").exists()
    failed = InboundEvent.objects.filter(status="failed")
    assert sorted(failed.values_list("provider", flat=True)) == ["thumbtack", "yelp"]  # the malformed two
    assert Message.objects.filter(direction="in", channel="thumbtack").count() >= 2
    assert Message.objects.filter(direction="in", channel="yelp").count() >= 2
