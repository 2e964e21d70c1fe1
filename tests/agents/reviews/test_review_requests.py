"""Review requests (agents/reviews/requests.py): one per job, however many
payment webhooks arrive at once; after the business's delay, through the send
gate; the same text for everyone; the stop rules; the counted link; the
figures; the business file's settings."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

import pytest
from django.test import Client
from django.utils import timezone

from agents.capture.processing import event_process
from agents.orchestrator import orchestrate_pending
from agents.revenue.jobs import job_complete
from agents.revenue.payments import payment_manual_record, refund_add
from agents.reviews.requests import TIMER_KIND, review_figures, review_request_send
from approvals.models import ApprovalRequest
from crm.models import (
    Business,
    InboundEvent,
    Job,
    Lead,
    Message,
    MessageTemplate,
    Receipt,
    Review,
    ReviewRequest,
    Stage,
    TeamMember,
    Timer,
)
from crm.services import lead_sync
from crm.services.business_file import BusinessFileError, business_file_load
from crm.services.consent import consent_record
from crm.services.timers import timer_run, timers_run_due
from tests.helpers.followup import NOON_NY, consent_all
from tests.helpers.races import run_together
from tests.helpers.revenue import held_lead, intent_event, sign

pytestmark = pytest.mark.django_db

PLACE = "ChIJN1t_tDeuEmsRUsoyG83frY4"
SMS = (
    "Hi {first_name}, thank you for choosing {business}. Would you review your visit? {review_url} "
    "Reply STOP to opt out."
)
EMAIL = "Hi {first_name},\n\nThank you for choosing {business}: {review_url}\n\n{owner_first_name}"


@pytest.fixture
def shop(business: Business, manager: TeamMember) -> Business:
    business.reviews = {"after": "paid", "delay_hours": 2, "google_place_id": PLACE}
    business.timezone = "America/New_York"
    business.save(update_fields=["reviews", "timezone"])
    MessageTemplate.objects.create(business=business, key="review_request", channel="sms", body=SMS, approved=True)
    MessageTemplate.objects.create(
        business=business,
        key="review_request_email",
        channel="email",
        subject="How did {business} do?",
        body=EMAIL,
        approved=True,
    )
    return business


def customer(
    business: Business,
    manager: TeamMember,
    *,
    first: str = "Pat",
    phone: str = "+12125550147",
    channels: tuple[str, ...] = ("sms", "email", "voice"),
):
    lead = held_lead(business, manager, first_name=first, phone=phone, email=f"{first.lower()}@example.com")
    consent_all(lead, channels=channels, at=NOON_NY - timedelta(days=2))
    job = Job.objects.create(business=business, lead=lead, status=Job.Status.COMPLETED, completed_at=NOON_NY)
    return lead, job


def paid(lead: Lead, job: Job, *, at: datetime = NOON_NY - timedelta(hours=2), amount: str = "450.00") -> None:
    payment_manual_record(lead=lead, amount=Decimal(amount), currency="USD", received_at=at, actor="mia", job=job)
    orchestrate_pending()


def send_due(at: datetime) -> int:
    return timers_run_due(now=at, kinds=[TIMER_KIND]).claimed


def link_of(body: str) -> str:
    found = re.search(r"https?://\S+/r/([\w-]+)/", body)
    assert found, f"no review link in {body!r}"
    return found.group(1)


# --- once per job ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_one_request_per_job_under_concurrent_payment_webhooks(shop, manager, stripe_secret):
    lead, job = customer(shop, manager)
    # Two payments for the one job (a card and the rest on a second card), each delivered twice, at once.
    events = [
        intent_event(event_id=f"evt_{n}", intent=f"pi_{n}", amount=22500, metadata={"job": job.public_id})
        for n in ("a", "b")
    ]
    bodies = [json.dumps(event).encode() for event in events]

    def post(body: bytes) -> int:
        response = Client().post(
            "/hooks/stripe/", data=body, content_type="application/json", headers={"Stripe-Signature": sign(body)}
        )
        return response.status_code

    assert run_together([partial(post, body) for body in bodies for _ in range(2)]) == [200] * 4
    stored = list(InboundEvent.objects.order_by("pk").values_list("pk", flat=True))
    assert run_together([partial(event_process, pk) for pk in stored]) == ["processed"] * 2
    # Each payment's orchestrator step, run by two workers at the same moment.
    steps = list(Timer.objects.filter(lead=lead, payload__event="payment").values_list("pk", flat=True))
    assert len(steps) == 2
    run_together([partial(timer_run, pk) for pk in steps])

    request = ReviewRequest.objects.get()
    assert (request.key, request.job_id, request.status) == (job.public_id, job.pk, "scheduled")
    assert Timer.objects.filter(kind=TIMER_KIND).count() == 1
    assert Receipt.objects.filter(action="review_request.scheduled").count() == 1


def test_a_second_payment_and_a_redelivered_step_ask_nothing_more(shop, manager):
    lead, job = customer(shop, manager)
    paid(lead, job, amount="200.00")
    paid(lead, job, amount="250.00", at=NOON_NY - timedelta(hours=1))
    assert ReviewRequest.objects.filter(lead=lead).count() == 1


# --- the delay, the gate, the text ------------------------------------------------------


def test_the_request_goes_out_after_the_delay_with_the_counted_link(shop, manager):
    lead, job = customer(shop, manager)
    paid(lead, job, at=NOON_NY - timedelta(hours=2))
    request = ReviewRequest.objects.get(lead=lead)
    assert request.due_at == NOON_NY
    assert send_due(NOON_NY - timedelta(minutes=1)) == 0  # not before the delay

    assert send_due(NOON_NY) == 1
    request.refresh_from_db()
    message = request.message
    assert (request.status, request.sent_at, message.channel, message.automated) == ("sent", NOON_NY, "sms", True)
    assert message.status in {str(Message.Status.DRY_RUN), str(Message.Status.QUEUED)}
    assert message.template_key == "review_request"
    assert message.body.startswith("Hi Pat, thank you for choosing Acme Heating & Air.")
    assert link_of(message.body) == request.token
    assert request.destination == f"https://search.google.com/local/writereview?placeid={PLACE}"
    # The gate judged it as every automated text: its receipt says so.
    assert Receipt.objects.filter(subject=message.public_id, actor="agent:send_gate").exists()
    assert send_due(NOON_NY + timedelta(hours=1)) == 0  # once


def test_the_same_text_goes_to_every_customer_whatever_the_thread_says(shop, manager):
    """No review gating: a lukewarm thread gets the very text a glowing one does."""
    glad, glad_job = customer(shop, manager, first="Ana", phone="+12125550148")
    meh, meh_job = customer(shop, manager, first="Bob", phone="+12125550149")
    for lead, words in ((glad, "You guys were amazing, thank you!"), (meh, "It was ok I guess, took a while.")):
        Message.objects.create(
            business=shop,
            lead=lead,
            contact=lead.contact,
            direction="in",
            channel="sms",
            status=Message.Status.RECEIVED,
            body=words,
            created_at=NOON_NY - timedelta(hours=3),
        )
    paid(glad, glad_job)
    paid(meh, meh_job)
    send_due(NOON_NY)

    bodies = {
        request.contact.first_name: request.message.body.replace(request.token, "LINK")
        for request in ReviewRequest.objects.select_related("message", "contact")
    }
    assert set(bodies) == {"Ana", "Bob"}
    assert bodies["Ana"].replace("Ana", "NAME") == bodies["Bob"].replace("Bob", "NAME")
    assert {r.destination for r in ReviewRequest.objects.all()} == {
        f"https://search.google.com/local/writereview?placeid={PLACE}"
    }


def test_quiet_hours_hold_it_until_the_morning(shop, manager):
    lead, job = customer(shop, manager)
    late = datetime(2026, 12, 2, 3, 30, tzinfo=NOON_NY.tzinfo)  # 22:30 in New York
    paid(lead, job, at=late - timedelta(hours=2))
    send_due(late)
    message = ReviewRequest.objects.get().message
    assert message.status == Message.Status.DEFERRED
    assert message.deferred_until is not None
    assert message.deferred_until.astimezone(timezone.get_fixed_timezone(-300)).hour == 8


def test_email_when_the_person_never_agreed_to_texts(shop, manager):
    lead, job = customer(shop, manager, channels=("email",))
    paid(lead, job)
    send_due(NOON_NY)
    message = ReviewRequest.objects.get().message
    assert (message.channel, message.subject) == ("email", "How did Acme Heating & Air do?")


def test_the_gate_lets_after_sale_texts_through_to_a_won_lead_only(shop, manager):
    from agents.outbound.gate import message_send

    won, job = customer(shop, manager)
    paid(won, job)
    lost = held_lead(shop, manager, first_name="Lou", phone="+12125550150")
    consent_all(lost, at=NOON_NY - timedelta(days=2))
    lead_sync.lead_transition(lost, Stage.LOST, actor="mia", reason="went elsewhere")

    def send(lead: Lead, template: str) -> Message:
        return message_send(
            lead=lead,
            channel="sms",
            body="Thanks! Reply STOP to opt out.",
            actor="agent:test",
            idempotency_key=f"t:{lead.public_id}:{template}",
            automated=True,
            template_key=template,
            now=NOON_NY,
        )

    assert send(won, "review_request").status != Message.Status.BLOCKED
    assert (send(won, "nudge_sms").status, Message.objects.get(template_key="nudge_sms").block_reason) == (
        "blocked",
        "stopped",
    )
    assert send(lost, "review_request").block_reason == "stopped"


# --- the stop rules ---------------------------------------------------------------------


def complaint_in_thread(lead: Lead) -> None:
    Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status=Message.Status.RECEIVED,
        body="The tech left a mess and the unit still rattles. Not happy.",
        intent="complaint",
        created_at=NOON_NY - timedelta(hours=1),
    )


def complaint_approval(lead: Lead) -> None:
    ApprovalRequest.objects.create(
        business=lead.business, lead=lead, kind=ApprovalRequest.Kind.COMPLAINT, summary="complaint", proposed_by="t"
    )


def refunded(lead: Lead) -> None:
    refund_add(lead.payments.get(), amount=Decimal("50.00"), actor="mia")


def reviewed(lead: Lead) -> None:
    Review.objects.create(
        business=lead.business,
        external_id="accounts/1/locations/2/reviews/r1",
        reviewer_name=lead.contact.name,
        rating=5,
        posted_at=NOON_NY - timedelta(hours=1),
        fetched_at=NOON_NY,
        contact=lead.contact,
    )


def revoked(lead: Lead) -> None:
    consent_record(
        contact_point=lead.contact.points.get(kind="phone"),
        channel="sms",
        granted=False,
        basis="keyword",
        actor="t",
        at=NOON_NY - timedelta(hours=1),
    )


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        (complaint_in_thread, "a complaint in the thread"),
        (complaint_approval, "a complaint in the thread"),
        (refunded, "a refund on the lead"),
        (reviewed, "the customer has already left a review"),
        (revoked, "opted out"),
    ],
)
def test_a_stop_rule_skips_the_request_and_says_why(shop, manager, rule, reason):
    lead, job = customer(shop, manager)
    paid(lead, job)
    rule(lead)
    send_due(NOON_NY)
    request = ReviewRequest.objects.get()
    assert request.status == "skipped"
    assert request.skipped_reason.startswith(reason)
    assert not Message.objects.filter(lead=lead, template_key__startswith="review_request").exists()
    assert Receipt.objects.filter(subject=request.public_id, action="review_request.skipped").exists()


def test_an_unapproved_text_is_never_sent(shop, manager):
    MessageTemplate.objects.filter(business=shop).update(approved=False)
    lead, job = customer(shop, manager)
    paid(lead, job)
    send_due(NOON_NY)
    request = ReviewRequest.objects.get()
    assert request.status == "skipped" and "not approved" in request.skipped_reason


# --- when it is asked -------------------------------------------------------------------


def test_a_deposit_with_the_invoice_still_open_asks_no_one_yet(shop, manager):
    from agents.revenue.jobs import invoice_issue

    lead, job = customer(shop, manager)
    invoice_issue(lead=lead, amount=Decimal("900.00"), currency="USD", actor="mia", job=job)
    paid(lead, job, amount="300.00")
    assert not ReviewRequest.objects.exists()


def test_a_business_asking_on_completion_asks_when_the_job_is_done(shop, manager):
    shop.reviews = {**shop.reviews, "after": "completed", "delay_hours": 0}
    shop.save(update_fields=["reviews"])
    lead, _ = customer(shop, manager)
    job = Job.objects.create(business=shop, lead=lead, status=Job.Status.SCHEDULED)
    job_complete(job, actor="tom", completed_at=NOON_NY)
    orchestrate_pending()
    request = ReviewRequest.objects.get()
    assert (request.job_id, request.trigger, request.due_at) == (job.pk, "completed", NOON_NY)
    paid(lead, job)  # the payment afterwards asks nothing more
    assert ReviewRequest.objects.count() == 1


@pytest.mark.parametrize("reviews", [{}, {"after": "off", "google_place_id": PLACE}, {"after": "paid"}])
def test_no_link_or_switched_off_asks_no_one(shop, manager, reviews):
    shop.reviews = reviews
    shop.save(update_fields=["reviews"])
    lead, job = customer(shop, manager)
    paid(lead, job)
    assert not ReviewRequest.objects.exists()
    assert Lead.objects.get(pk=lead.pk).stage == Stage.WON


# --- the counted link -------------------------------------------------------------------


def test_the_link_counts_each_tap_and_sends_the_customer_on(shop, manager, client):
    lead, job = customer(shop, manager)
    paid(lead, job)
    send_due(NOON_NY)
    request = ReviewRequest.objects.get()

    response = client.get(f"/r/{request.token}/")
    assert response.status_code == 302
    assert response["Location"] == request.destination
    assert client.head(f"/r/{request.token}/").status_code == 302  # a link preview: not counted
    client.get(f"/r/{request.token}/")
    request.refresh_from_db()
    assert request.clicks == 2 and request.first_clicked_at is not None
    assert client.get("/r/not-a-token/").status_code == 404
    assert client.post(f"/r/{request.token}/").status_code == 405


def test_the_figures_per_business(shop, manager, client, other_business):
    for n, first in enumerate(("Ana", "Bob", "Cy")):
        lead, job = customer(shop, manager, first=first, phone=f"+1212555016{n}")
        paid(lead, job)
    refunded(Lead.objects.get(contact__first_name="Cy"))
    send_due(NOON_NY)
    ana = ReviewRequest.objects.get(contact__first_name="Ana")
    client.get(f"/r/{ana.token}/")
    client.get(f"/r/{ana.token}/")
    Review.objects.create(
        business=shop,
        external_id="r-ana",
        reviewer_name="Ana Doe",
        rating=5,
        posted_at=NOON_NY + timedelta(hours=1),
        fetched_at=NOON_NY,
        contact=ana.contact,
        review_request=ana,
    )
    Review.objects.create(
        business=shop, external_id="r-x", reviewer_name="Someone", rating=4, posted_at=NOON_NY, fetched_at=NOON_NY
    )
    Review.objects.create(
        business=other_business, external_id="r-o", reviewer_name="O", rating=1, posted_at=NOON_NY, fetched_at=NOON_NY
    )

    figures = review_figures(shop, since=NOON_NY - timedelta(days=7), until=NOON_NY + timedelta(days=1))
    assert (figures.sent, figures.skipped, figures.clicks, figures.clicked_requests) == (2, 1, 2, 1)
    assert (figures.reviews, figures.reviews_matched, figures.click_rate) == (2, 1, 0.5)
    assert review_figures(other_business, since=NOON_NY - timedelta(days=7), until=NOON_NY).sent == 0


def test_sending_is_idempotent_under_a_redelivered_timer(shop, manager):
    lead, job = customer(shop, manager)
    paid(lead, job)
    request = ReviewRequest.objects.get()
    review_request_send(request.pk, now=NOON_NY)
    review_request_send(request.pk, now=NOON_NY + timedelta(minutes=5))
    assert Message.objects.filter(lead=lead, template_key="review_request").count() == 1


def test_forgetting_a_customer_erases_the_words_of_their_review(shop, manager):
    from crm.services.forget import contact_forget

    lead, _ = customer(shop, manager)
    reviewed(lead)
    words = {"comment": "Pat here: great job on my furnace", "reply_body": "Thanks Pat!"}
    Review.objects.filter(contact=lead.contact).update(**words)
    contact_forget(lead.contact, actor="mia", reason="asked to be forgotten")
    review = Review.objects.get()
    assert (review.rating, review.contact_id) == (5, lead.contact_id)
    assert "Pat" not in f"{review.reviewer_name} {review.comment} {review.reply_body}"


# --- the business file -------------------------------------------------------------------


BUSINESS_FILE = """
business: {{slug: reviewed, name: Reviewed Roofing, timezone: America/Chicago}}
policy:
  reviews: {reviews}
"""


def test_the_business_file_sets_when_and_where(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(
        BUSINESS_FILE.format(reviews="{after: completed, delay_hours: 24, url: 'https://g.page/r/x/review'}")
    )
    business_file_load(path)
    business = Business.objects.get(slug="reviewed")
    assert business.reviews == {"after": "completed", "delay_hours": 24, "url": "https://g.page/r/x/review"}


@pytest.mark.parametrize(
    ("reviews", "said"),
    [
        ("{after: whenever}", "bad moment 'whenever'"),
        ("{delay_hours: -1}", "must be at least 0"),
        ("{url: 'http://bit.ly/x'}", "public https:// address"),
        ("{google_place_id: 'ChIJ bad id'}", "Google place id"),
        ("{ask_only_happy: true}", "unknown key 'ask_only_happy'"),
    ],
)
def test_the_business_file_refuses_bad_review_settings(tmp_path, reviews, said):
    path = tmp_path / "b.yaml"
    path.write_text(BUSINESS_FILE.format(reviews=reviews))
    with pytest.raises(BusinessFileError, match=re.escape(said)):
        business_file_load(path)
