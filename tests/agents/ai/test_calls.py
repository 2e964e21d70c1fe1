"""The monthly cap, counted per business and calendar month of its zone,
claimed safely by concurrent workers; and a person forgotten takes the
digests of their model calls along."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from agents.ai.calls import month_of, quota_claim
from crm.models import Business, ModelCall, ModelCallQuota
from crm.services.forget import contact_forget
from tests.factories import BusinessFactory, lead_create
from tests.helpers.races import run_together


def test_the_month_is_the_businesss_own(db: None) -> None:
    chicago = BusinessFactory.create(slug="chi", timezone="America/Chicago")
    # 04:30 UTC on April 1st is 11:30 PM on March 31st in Chicago (CDT).
    assert month_of(chicago, datetime(2026, 4, 1, 4, 30, tzinfo=UTC)) == date(2026, 3, 1)
    assert month_of(chicago, datetime(2026, 4, 1, 5, 30, tzinfo=UTC)) == date(2026, 4, 1)


def test_the_cap_counts_per_month_and_a_new_month_starts_again(db: None) -> None:
    business = BusinessFactory.create(slug="capped", timezone="America/Chicago", ai_monthly_calls=2)
    march = datetime(2026, 3, 15, 12, tzinfo=UTC)
    assert [quota_claim(business, now=march) for _ in range(3)] == [True, True, False]
    assert quota_claim(business, now=datetime(2026, 4, 2, 12, tzinfo=UTC))
    assert dict(ModelCallQuota.objects.values_list("month", "used")) == {date(2026, 3, 1): 2, date(2026, 4, 1): 1}


def test_no_cap_still_counts_and_a_cap_of_zero_allows_none(db: None) -> None:
    open_ended = BusinessFactory.create(slug="open")
    assert all(quota_claim(open_ended) for _ in range(5))
    assert ModelCallQuota.objects.get(business=open_ended).used == 5
    closed = BusinessFactory.create(slug="closed", ai_monthly_calls=0)
    assert not quota_claim(closed) and not ModelCallQuota.objects.filter(business=closed).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_never_take_a_business_past_its_cap() -> None:
    business = BusinessFactory.create(slug="raced", ai_monthly_calls=7)
    workers = 16

    def claim() -> list[bool]:
        return [quota_claim(Business.objects.get(pk=business.pk)) for _ in range(3)]

    granted = [ok for oks in run_together([claim] * workers, timeout=30) for ok in oks]
    assert len(granted) == workers * 3
    assert granted.count(True) == 7
    assert ModelCallQuota.objects.get(business=business).used == 7


def test_forgetting_a_person_erases_the_digests_of_their_model_calls(db: None) -> None:
    business = BusinessFactory.create(slug="forgetful")
    lead = lead_create(business)
    call = ModelCall.objects.create(
        business=business,
        lead=lead,
        purpose="reply",
        provider="openai",
        model="m",
        status="ok",
        prompt_digest="a" * 64,
        answer_digest="b" * 64,
    )
    contact_forget(lead.contact, actor="test", reason="asked")
    call.refresh_from_db()
    assert (call.prompt_digest, call.answer_digest) == ("", "")
    assert call.status == "ok"  # the count stays
