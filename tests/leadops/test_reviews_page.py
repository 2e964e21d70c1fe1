"""The reviews page (leadops/reviews.py): owners and managers read the
figures and the reviews and propose replies; a setter is refused; a reply is
proposed only with the form's CSRF token and waits for another person."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.reviews.pull import reviews_pull
from agents.reviews.replies import review_reply_post
from approvals.models import ApprovalRequest
from crm.models import Business, MessageTemplate, Review, Role, SyncConnection, TeamMember
from crm.services.sync import connection_connect
from tests.factories import member_create
from tests.helpers.google_business import ACCOUNT, GoogleBusinessServer, google_business_running

pytestmark = pytest.mark.django_db


@pytest.fixture
def google(settings: Any) -> Iterator[GoogleBusinessServer]:
    with google_business_running(settings) as server:
        yield server


def _staff(member: TeamMember) -> TeamMember:
    member.user.is_staff = True
    member.user.save(update_fields=["is_staff"])
    return member


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return _staff(member_create(business, Role.OWNER, username="olivia"))


@pytest.fixture
def reviews(business: Business, google: GoogleBusinessServer, owner: TeamMember) -> list[Review]:
    tokens = google.grant()
    conn = connection_connect(
        business,
        provider="google_business",
        account_id=ACCOUNT,
        account_name="Acme",
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="olivia",
    )
    google.review_add("Pat Doe", 5, "Fast and friendly.", at=timezone.now() - timedelta(days=2))
    google.review_add("Kim Lee", 1, "Nobody came.", at=timezone.now() - timedelta(days=1))
    reviews_pull(SyncConnection.objects.get(pk=conn.pk), now=timezone.now())
    return list(Review.objects.order_by("posted_at"))


def _client(member: TeamMember, **kw: Any) -> Client:
    client = Client(**kw)
    client.force_login(member.user)
    return client


def test_an_owner_reads_the_figures_and_the_reviews_with_a_reply_prefilled(business, owner, reviews):
    MessageTemplate.objects.create(
        business=business,
        key="review_reply_positive",
        channel="sms",
        body="Thanks so much, {first_name}! {business}",
        approved=True,
    )

    page = _client(owner).get("/admin/reviews/")

    assert page.status_code == 200
    html = page.content.decode()
    reviews = html.split('data-key="reviews"')[1].split("</div>")[0]
    assert '<dd class="headline-value">2</dd>' in reviews and "+2 vs the 30 days before" in reviews
    assert 'id="stars-chart"' in html
    assert "Fast and friendly." in html and "Nobody came." in html
    assert "Reviews of <strong>Acme Heating &amp; Air</strong>, last read" in html
    # The positive review's form holds the playbook's text; the negative one the built-in prefill.
    assert "Thanks so much, Pat! Acme Heating &amp; Air" in html
    assert "Thank you for telling us, Kim." in html
    assert "no approved review_reply_negative" in html


def test_a_setter_and_a_technician_are_refused(business, reviews):
    setter = _staff(member_create(business, Role.SETTER, username="sam"))
    technician = _staff(member_create(business, Role.TECHNICIAN, username="tom"))

    assert _client(setter).get("/admin/reviews/").status_code == 403
    assert _client(technician).get("/admin/reviews/").status_code == 403
    review = reviews[0]
    assert _client(setter).post(f"/admin/reviews/{review.public_id}/reply/", {"body": "Thanks!"}).status_code == 403
    assert not ApprovalRequest.objects.exists()


def test_a_proposed_reply_waits_for_approval_and_the_page_links_to_it(business, owner, reviews):
    review = reviews[0]
    client = _client(owner, enforce_csrf_checks=True)
    page = client.get("/admin/reviews/")
    token = page.cookies["csrftoken"].value

    refused = client.post(f"/admin/reviews/{review.public_id}/reply/", {"body": "Thank you, Pat!"})
    assert refused.status_code == 403  # no CSRF token
    done = client.post(
        f"/admin/reviews/{review.public_id}/reply/", {"body": "Thank you, Pat!", "csrfmiddlewaretoken": token}
    )

    assert done.status_code == 302
    approval = ApprovalRequest.objects.get(kind="review_reply")
    assert (approval.status, approval.payload["body"], approval.proposed_by_user) == (
        "pending",
        "Thank you, Pat!",
        owner.user,
    )
    review.refresh_from_db()
    assert review.reply_status == "pending_approval"
    html = client.get("/admin/reviews/").content.decode()
    assert f"/app/approvals/{approval.public_id}/" in html and 'id="review-pending"' in html


def test_a_reply_that_promises_a_discount_is_not_proposed_and_says_why(business, owner, reviews):
    review = reviews[1]

    answer = _client(owner).post(
        f"/admin/reviews/{review.public_id}/reply/", {"body": "Sorry Kim, 20% off your next visit!"}, follow=True
    )

    assert answer.status_code == 200
    assert "promises what the playbook does not" in answer.content.decode()
    assert not ApprovalRequest.objects.exists()


def test_a_manager_approves_the_reply_in_the_workspace_and_it_is_posted(
    business, owner, manager, reviews, google
) -> None:
    review = reviews[0]
    _client(owner).post(f"/admin/reviews/{review.public_id}/reply/", {"body": "Thank you, Pat!"})
    approval = ApprovalRequest.objects.get(kind="review_reply")

    assert _client(owner).post(f"/app/approvals/{approval.public_id}/approve/").status_code == 302
    approval.refresh_from_db()
    assert approval.status == "pending"  # the proposer's own approval is refused
    answer = _client(_staff(manager)).post(f"/app/approvals/{approval.public_id}/approve/")

    assert answer.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "approved"
    review_reply_post(review.pk)  # the task the approval enqueued after its commit
    review.refresh_from_db()
    assert review.reply_status == "posted"
    assert google.replies_put == [(review.external_id, "Thank you, Pat!")]
