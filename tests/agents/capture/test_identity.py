"""The identity resolver: one person, one contact; one need, one open lead."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.capture.base import Capture, ConsentEvidence
from agents.capture.identity import capture_apply
from approvals.models import ApprovalRequest
from crm.models import Contact, ContactPoint, Lead, ServiceLine, Stage
from crm.services import lead_sync

pytestmark = pytest.mark.django_db


def capture(**kw) -> Capture:
    kw.setdefault("channel", "form")
    kw.setdefault("occurred_at", timezone.now())
    return Capture(**kw)


def test_the_same_person_through_three_channels_is_one_contact_and_one_lead(business):
    first = capture_apply(
        business=business, capture=capture(first_name="Ana", phones=["(212) 555-0147"], emails=["ana@x.com"])
    )
    second = capture_apply(business=business, capture=capture(channel="call", phones=["+1 212 555 0147"]))
    third = capture_apply(business=business, capture=capture(emails=["ANA@X.COM"], last_name="Lopez"))
    assert first.contact == second.contact == third.contact
    assert first.lead == second.lead == third.lead
    assert (first.created_lead, second.created_lead, third.created_lead) == (True, False, False)
    assert first.lead.touches.count() == 3
    contact = Contact.objects.get()
    assert (contact.first_name, contact.last_name) == ("Ana", "Lopez")  # blanks filled, nothing overwritten


def test_phone_and_email_of_two_different_contacts_are_not_merged_but_asked_about(business):
    by_phone = capture_apply(business=business, capture=capture(phones=["+12125550147"]))
    by_email = capture_apply(business=business, capture=capture(emails=["pat@x.com"]))
    both = capture_apply(business=business, capture=capture(phones=["+12125550147"], emails=["pat@x.com"]))

    assert both.contact == by_phone.contact  # the phone decides
    assert Contact.objects.count() == 2
    assert both.lead == by_phone.lead and "merge_conflict" in both.lead.exceptions
    approval = ApprovalRequest.objects.get(kind="merge_contacts")
    keep, merge = by_phone.contact.public_id, by_email.contact.public_id
    assert approval.payload == {
        "keep": keep,
        "merge": [merge],
        "evidence": [{"lead": both.lead.public_id, "event": None, "contacts": [keep, merge]}],
    }
    assert approval.status == "pending" and approval.proposed_by == "agent:identity_resolver"
    assert set(by_email.contact.points.values_list("value", flat=True)) == {"pat@x.com"}


def test_a_form_naming_a_customers_email_with_a_new_phone_never_puts_that_phone_on_them(business):
    """Anyone can type a customer's email into a public form. The phone that
    came with it gets a contact and a lead of its own, with the form's
    consent; the customer keeps only their own points, and a person is asked
    whether the two are one (the merge question)."""
    customer = capture_apply(
        business=business, capture=capture(first_name="Rosa", phones=["+12125550147"], emails=["rosa@x.com"])
    )
    stranger = capture_apply(
        business=business,
        capture=capture(
            first_name="Rosa",
            phones=["+12125550999"],
            emails=["rosa@x.com"],
            consent=ConsentEvidence(granted=True, channels=("sms",), text="I agree to texts."),
        ),
    )

    assert stranger.contact != customer.contact and stranger.created_contact
    assert set(customer.contact.points.values_list("value", flat=True)) == {"+12125550147", "rosa@x.com"}
    assert set(stranger.contact.points.values_list("value", flat=True)) == {"+12125550999"}
    assert stranger.lead != customer.lead and "merge_conflict" in stranger.lead.exceptions
    approval = ApprovalRequest.objects.get(kind="merge_contacts", status="pending")
    assert approval.payload["merge"] == [customer.contact.public_id]
    # The consent the form gave is the new number's alone: the customer's phone gained nothing.
    new_point = ContactPoint.objects.get(value="+12125550999")
    assert new_point.consent_events.filter(channel="sms", action="grant").exists()
    assert not ContactPoint.objects.get(value="+12125550147").consent_events.exists()
    # A text from the new number is the stranger's, never a reply on the customer's lead.
    text = capture_apply(
        business=business, capture=capture(channel="sms", phones=["+12125550999"], message_body="cancel")
    )
    assert text.lead == stranger.lead and text.contact == stranger.contact


def test_a_known_email_with_no_phone_still_finds_the_customer(business):
    customer = capture_apply(business=business, capture=capture(phones=["+12125550147"], emails=["rosa@x.com"]))
    again = capture_apply(business=business, capture=capture(emails=["rosa@x.com"], request_text="And the AC?"))
    assert again.contact == customer.contact and not again.created_contact


def test_a_closed_lead_leads_to_a_new_lead_on_the_same_contact(business):
    first = capture_apply(business=business, capture=capture(phones=["+12125550147"]))
    lead_sync.lead_transition(first.lead, Stage.LOST, actor="sam", reason="chose a competitor")
    again = capture_apply(business=business, capture=capture(phones=["+12125550147"]))
    assert again.contact == first.contact and again.lead != first.lead and again.created_lead


def test_an_open_lead_untouched_past_the_dedupe_window_is_closed_and_a_new_one_opened(business):
    long_ago = timezone.now() - timedelta(days=business.dedupe_window_days + 1)
    old = capture_apply(business=business, capture=capture(phones=["+12125550147"], occurred_at=long_ago))
    new = capture_apply(business=business, capture=capture(phones=["+12125550147"]))
    old.lead.refresh_from_db()
    assert old.lead.stage == Stage.LOST and new.lead != old.lead
    assert Lead.objects.exclude(stage__in=["lost"]).count() == 1


def test_two_needs_of_one_person_are_two_open_leads(business):
    ServiceLine.objects.create(business=business, slug="hvac", name="HVAC", keywords=["furnace"])
    ServiceLine.objects.create(business=business, slug="plumbing", name="Plumbing", keywords=["leak"])
    furnace = capture_apply(business=business, capture=capture(phones=["+12125550147"], request_text="Furnace is out"))
    leak = capture_apply(
        business=business, capture=capture(phones=["+12125550147"], request_text="A leak under the sink")
    )
    assert furnace.contact == leak.contact and furnace.lead != leak.lead
    assert {furnace.lead.service_line.slug, leak.lead.service_line.slug} == {"hvac", "plumbing"}


def test_a_text_from_a_known_person_is_a_reply_on_their_open_lead(business):
    lead = capture_apply(business=business, capture=capture(phones=["+12125550147"])).lead
    reply = capture_apply(
        business=business,
        capture=capture(channel="sms", phones=["+12125550147"], message_body="Tuesday works", message_sid="SM1"),
    )
    assert reply.lead == lead and not reply.created_lead and reply.touch is None
    assert reply.message is not None and reply.message.body == "Tuesday works" and reply.message.lead == lead
    assert lead.touches.count() == 1


def test_a_test_lead_is_stored_flagged_and_marked(business):
    applied = capture_apply(business=business, capture=capture(phones=["+16505550123"], is_test=True))
    assert applied.lead.is_test and applied.lead.exceptions == ["test_lead"]


def test_two_people_who_typed_the_same_unparseable_phone_stay_two_contacts(business):
    one = capture_apply(business=business, capture=capture(first_name="Al", phones=["call me"]))
    two = capture_apply(business=business, capture=capture(first_name="Bo", phones=["call me"]))
    assert one.contact != two.contact
    assert all("invalid_phone" in applied.lead.exceptions for applied in (one, two))


@pytest.mark.parametrize("caller", ["anonymous", "Restricted", "+266696687"])
def test_withheld_callers_are_never_merged_into_one_contact(business, caller):
    first = capture_apply(business=business, capture=capture(channel="call", phones=[caller]))
    second = capture_apply(business=business, capture=capture(channel="call", phones=[caller]))
    assert first.contact != second.contact
    assert first.lead.exceptions == ["missing_identity"]
