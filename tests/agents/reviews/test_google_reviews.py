"""Google reviews in, replies out (agents/reviews/pull.py, agents/reviews/replies.py):
the connection through the sync consent, every page read and kept once, an
edit updating its row, matching by name to the customer who was asked, a
refused grant put to a person, and a reply posted only after another
person approved it. Against a real local server in Google's shapes
(devtools/simulator/google_business_api.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.test import Client
from django.utils import timezone

from agents.reviews.google_business import SCOPE
from agents.reviews.pull import LocationUnchosen, location_choose, location_of, reviews_pull, reviews_sweep
from agents.reviews.replies import (
    ReplyRefused,
    review_reply_post,
    review_reply_propose,
    review_reply_retry,
)
from agents.sync.base import AuthRefused
from approvals.models import ApprovalRequest
from approvals.services import ApprovalInvalid, SelfApproval, approval_approve, approval_edit, approval_reject
from crm.models import Business, ExceptionItem, Lead, Receipt, Review, ReviewRequest, Role, SyncConnection, TeamMember
from crm.services.sync import connection_connect
from tests.factories import lead_create, member_create
from tests.helpers.google_business import ACCOUNT, LOCATION, GoogleBusinessServer, google_business_running

pytestmark = pytest.mark.django_db


@pytest.fixture
def google(settings: Any) -> Iterator[GoogleBusinessServer]:
    with google_business_running(settings) as server:
        yield server


@pytest.fixture
def owner(business: Business) -> TeamMember:
    member = member_create(business, Role.OWNER, username="olivia")
    member.user.is_staff = True
    member.user.save(update_fields=["is_staff"])
    return member


@pytest.fixture
def profile(business: Business, google: GoogleBusinessServer, owner: TeamMember, manager: TeamMember) -> SyncConnection:
    """The shop's profile connected, as the OAuth callback leaves it."""
    tokens = google.grant()
    return connection_connect(
        business,
        provider="google_business",
        account_id=ACCOUNT,
        account_name="Acme Heating & Air",
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="olivia",
    )


def _asked(lead: Lead, *, sent_at: datetime) -> ReviewRequest:
    # The request as agents/reviews/requests.py leaves it once sent (its own tests drive that path).
    return ReviewRequest.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        key=lead.public_id,
        trigger="paid",
        status="sent",
        due_at=sent_at,
        sent_at=sent_at,
        token=f"t{lead.pk}x{sent_at.timestamp():.0f}",
        destination="https://search.google.com/local/writereview?placeid=x",
    )


def _pulled(profile: SyncConnection) -> Any:
    profile.refresh_from_db()
    return reviews_pull(profile, now=timezone.now())


# --- connecting ---------------------------------------------------------------------------------------


def test_an_owner_connects_the_profile_through_googles_consent_and_its_only_location_is_kept(business, owner, google):
    client = Client()
    client.force_login(owner.user)

    started = client.post("/admin/sync/google_business/connect/", {"business": business.slug})
    assert started.status_code == 302
    assert parse_qs(urlsplit(started["Location"]).query)["scope"] == [SCOPE]
    back = requests.get(started["Location"], allow_redirects=False, timeout=5)
    url = urlsplit(back.headers["Location"])
    finished = client.get(url.path, {k: v[0] for k, v in parse_qs(url.query).items()})

    assert finished.status_code == 302
    conn = SyncConnection.objects.get(provider="google_business")
    assert (conn.business, conn.account_id, conn.status, conn.member) == (business, ACCOUNT, "active", None)
    assert conn.refresh_token and conn.access_token

    reviews_pull(conn, now=timezone.now())
    conn.refresh_from_db()
    kept = location_of(conn)
    assert kept is not None and (kept.account, kept.name) == (ACCOUNT, LOCATION)


def test_a_profile_with_several_locations_waits_for_an_owner_to_pick_one(profile, google):
    google.locations[ACCOUNT].append({"name": "locations/999", "title": "Acme North"})
    google.review_add("Pat Doe", 5, "Great", parent=f"{ACCOUNT}/locations/999")

    with pytest.raises(LocationUnchosen):
        _pulled(profile)
    profile.refresh_from_db()
    assert location_of(profile) is None and "2 locations" in profile.last_error
    assert not Review.objects.exists()

    location_choose(profile, "locations/999", actor="olivia")
    assert reviews_pull(profile, now=timezone.now()).new == 1
    assert Review.objects.get().location == f"{ACCOUNT}/locations/999"


# --- reading ------------------------------------------------------------------------------------------------


def test_every_page_is_read_and_a_second_pull_changes_nothing(business, profile, google):
    start = timezone.now() - timedelta(days=200)
    for n in range(120):
        google.review_add(f"Customer {n}", 1 + n % 5, f"Review {n}", at=start + timedelta(hours=n))

    first = _pulled(profile)

    assert (first.read, first.new) == (120, 120)
    assert Review.objects.filter(business=business).count() == 120
    pages = [path for method, path in google.seen if path.endswith("/reviews")]
    assert len(pages) == 3  # 50 + 50 + 20
    assert Receipt.objects.filter(action="review.received").count() == 120

    again = _pulled(profile)

    assert (again.read, again.new, again.edited) == (120, 0, 0)
    assert Review.objects.filter(business=business).count() == 120
    assert Receipt.objects.filter(action="review.received").count() == 120
    profile.refresh_from_db()
    assert profile.last_success_at is not None and profile.cursors["reviews"]["pulled_at"]


def test_stars_words_become_numbers_and_a_reply_already_on_google_is_posted(profile, google):
    written = timezone.now() - timedelta(days=3)
    name = google.review_add("Ana Núñez", 4, "On time, tidy.", at=written, reply="Thanks Ana!")
    google.review_add("Anonymous", 2, anonymous=True)

    _pulled(profile)

    review = Review.objects.get(external_id=name)
    assert (review.rating, review.comment, review.reviewer_name) == (4, "On time, tidy.", "Ana Núñez")
    assert abs(review.posted_at - written) < timedelta(seconds=1) and review.edited_at is None
    assert (review.reply_status, review.reply_body) == ("posted", "Thanks Ana!")
    assert review.reply_posted_at is not None
    anonymous = Review.objects.exclude(external_id=name).get()
    assert (anonymous.rating, anonymous.reviewer_name, anonymous.comment) == (2, "", "")


def test_an_edited_review_updates_its_row(profile, google):
    name = google.review_add("Pat Doe", 2, "Late.", at=timezone.now() - timedelta(days=2))
    _pulled(profile)
    edited_at = timezone.now() - timedelta(hours=1)
    google.review_edit(name, stars=5, comment="Late, but they fixed it well.", at=edited_at)

    result = _pulled(profile)

    assert (result.new, result.edited) == (0, 1)
    review = Review.objects.get(external_id=name)
    assert (review.rating, review.comment) == (5, "Late, but they fixed it well.")
    assert review.edited_at is not None and abs(review.edited_at - edited_at) < timedelta(seconds=1)
    assert Receipt.objects.filter(subject=review.public_id, action="review.edited").count() == 1


# --- matching ------------------------------------------------------------------------------------------------


def test_a_review_is_matched_by_name_to_the_customer_who_was_asked(business, profile, google):
    now = timezone.now()
    asked = lead_create(business, first_name="José", last_name="García", phone="+12125550148")
    request = _asked(asked, sent_at=now - timedelta(days=5))
    lead_create(business, first_name="Kim", last_name="Lee", phone="+12125550149")  # never asked
    name = google.review_add("jose  GARCIA", 5, "Great work", at=now - timedelta(days=1))
    unasked = google.review_add("Kim Lee", 5, "Nice", at=now - timedelta(days=1))

    assert _pulled(profile).matched == 1

    review = Review.objects.get(external_id=name)
    assert (review.contact, review.lead, review.review_request) == (asked.contact, asked, request)
    assert Review.objects.get(external_id=unasked).lead is None


def test_two_customers_of_one_name_leave_the_review_unmatched(business, profile, google):
    now = timezone.now()
    first = lead_create(business, first_name="Pat", last_name="Doe", phone="+12125550148")
    lead_create(business, first_name="Pat", last_name="Doe", phone="+12125550149", email="pat2@example.com")
    _asked(first, sent_at=now - timedelta(days=5))
    name = google.review_add("Pat Doe", 5, "Great", at=now - timedelta(days=1))

    _pulled(profile)

    assert Review.objects.get(external_id=name).lead is None


def test_a_request_sent_after_the_review_or_long_before_matches_nothing(business, profile, google):
    now = timezone.now()
    late = lead_create(business, first_name="Ana", last_name="Silva", phone="+12125550148")
    _asked(late, sent_at=now - timedelta(hours=1))
    old = lead_create(business, first_name="Bo", last_name="Chen", phone="+12125550149")
    _asked(old, sent_at=now - timedelta(days=90))
    google.review_add("Ana Silva", 5, at=now - timedelta(days=1))
    google.review_add("Bo Chen", 5, at=now - timedelta(days=1))

    assert _pulled(profile).matched == 0
    assert not Review.objects.filter(lead__isnull=False).exists()


# --- a refused grant -----------------------------------------------------------------------------------------


def test_a_refused_grant_puts_the_connection_to_a_person(profile, google, manager):
    google.revoke()  # the owner removed our access: the token and the refresh token are refused

    with pytest.raises(AuthRefused):
        _pulled(profile)

    profile.refresh_from_db()
    assert profile.status == "reauthorize"
    assert ExceptionItem.objects.filter(kind="sync_reconnect", status="open", owner=manager).exists()
    assert reviews_sweep(now=timezone.now()) == {"pulled": 0, "failed": 0, "new": 0}  # it waits for a person


def test_an_expired_access_token_is_refreshed_and_the_pull_goes_on(profile, google):
    google.review_add("Pat Doe", 5)
    google.expire_access()

    assert _pulled(profile).new == 1
    profile.refresh_from_db()
    assert profile.status == "active"


def test_the_sweep_reads_each_profile_when_due_only(profile, google):
    google.review_add("Pat Doe", 5)
    now = timezone.now()

    assert reviews_sweep(now=now) == {"pulled": 1, "failed": 0, "new": 1}
    assert reviews_sweep(now=now + timedelta(minutes=30))["pulled"] == 0
    assert reviews_sweep(now=now + timedelta(hours=3, minutes=1))["pulled"] == 1


# --- replies ---------------------------------------------------------------------------------------------------


@pytest.fixture
def review(profile: SyncConnection, google: GoogleBusinessServer) -> Review:
    google.review_add("Pat Doe", 2, "They came a day late.", at=timezone.now() - timedelta(days=1))
    _pulled(profile)
    return Review.objects.get()


REPLY = "Thank you for telling us, Pat. We're sorry we were late. Please call us so we can talk it through."


def test_a_reply_is_posted_only_after_another_person_approves_it(review, google, owner, manager):
    approval = review_reply_propose(review, REPLY, user=owner.user)

    assert (approval.kind, approval.status, approval.payload["body"]) == ("review_reply", "pending", REPLY)
    review.refresh_from_db()
    assert review.reply_status == "pending_approval"
    assert google.replies_put == []
    with pytest.raises(SelfApproval):
        approval_approve(approval, user=owner.user)
    with pytest.raises(ReplyRefused, match="waiting for a decision"):
        review_reply_propose(review, "Another reply", user=manager.user)

    approval_approve(approval, user=manager.user)
    assert google.replies_put == []  # not inside the decision: the post is its own task
    posted = review_reply_post(review.pk)

    assert google.replies_put == [(review.external_id, REPLY)]
    assert google.reply_of(review.external_id) == REPLY
    assert (posted.reply_status, posted.reply_body, posted.reply_error) == ("posted", REPLY, "")
    assert posted.reply_posted_at is not None
    actions = set(Receipt.objects.filter(subject=review.public_id).values_list("action", flat=True))
    assert {"review.reply_proposed", "review.reply_approved", "review.reply_posted"} <= actions
    # Posting again (a redelivered task) sends nothing more.
    review_reply_post(review.pk)
    assert len(google.replies_put) == 1


def test_a_reply_google_refuses_is_failed_shown_and_posted_on_retry(review, google, owner, manager):
    approval = review_reply_propose(review, REPLY, user=owner.user)
    approval_approve(approval, user=manager.user)
    google.fail_replies = 503

    failed = review_reply_post(review.pk)

    assert failed.reply_status == "failed" and "503" in failed.reply_error
    assert Receipt.objects.filter(subject=review.public_id, action="review.reply_failed").exists()

    google.fail_replies = 0
    retried = review_reply_retry(failed, actor="mia")

    assert retried.reply_status == "posted" and google.reply_of(review.external_id) == REPLY


def test_the_claims_guard_refuses_a_reply_that_promises_what_the_playbook_does_not(review, owner, manager):
    with pytest.raises(ReplyRefused, match="discount"):
        review_reply_propose(review, "So sorry, Pat! Your next visit is 50% off, on us.", user=owner.user)
    assert not ApprovalRequest.objects.exists()
    review.refresh_from_db()
    assert review.reply_status == ""

    approval = review_reply_propose(review, REPLY, user=owner.user)
    with pytest.raises(ApprovalInvalid, match=r"free|discount|price"):
        approval_edit(approval, user=manager.user, payload={"body": REPLY + " The next service call is free."})
    approval.refresh_from_db()
    assert approval.payload["body"] == REPLY


def test_a_rejected_reply_puts_the_review_back_as_it_was(review, google, owner, manager):
    approval = review_reply_propose(review, REPLY, user=owner.user)

    approval_reject(approval, user=manager.user, note="Let's call Pat first.")

    review.refresh_from_db()
    assert review.reply_status == "" and review.reply_body == ""
    assert review_reply_post(review.pk).reply_status == ""
    assert google.replies_put == []


def test_a_matched_review_shows_in_the_leads_thread(business, profile, google, manager):
    now = timezone.now()
    asked = lead_create(business, first_name="José", last_name="García", phone="+12125550148")
    _asked(asked, sent_at=now - timedelta(days=5))
    google.review_add("José García", 5, "Fixed our furnace in an hour.", at=now - timedelta(days=1))
    _pulled(profile)
    manager.user.is_staff = True
    manager.user.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(manager.user)

    page = client.get(f"/app/leads/{asked.public_id}/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "Google review" in html and "Fixed our furnace in an hour." in html
