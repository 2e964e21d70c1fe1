"""The approved playbook: versions, approval by a person, rendering, and the
automation read. On PostgreSQL: the approval rules are database checks too."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from agents.playbook.templates import (
    TemplateApprovalRefused,
    TemplateError,
    TemplateRenderError,
    TemplateUnavailable,
    placeholders_of,
    playbook_context,
    template_approve,
    template_for_automation,
    template_render,
    template_revise,
    template_version_in_force,
    text_render,
)
from crm.models import Business, Lead, MessageTemplate, MessageTemplateVersion, Receipt, ServiceLine, TeamMember
from crm.services.business_file import business_file_parse, business_spec_apply
from crm.services.lead_sync import lead_assign
from crm.services.receipts import receipts_verify
from tests.factories import BusinessFactory, lead_create, member_create

ACK = (
    "Hi {first_name}, this is {business}. We got your request and {owner_first_name} will reach out shortly. Reply "
    "STOP to opt out."
)
ACK_V2 = (
    "Hi {first_name}, thanks for contacting {business}. {owner_first_name} will text you soon. Reply STOP to opt out."
)
PLAYBOOK = f"""
business: {{slug: acme-play, name: Acme Heating & Air, timezone: America/Chicago, region: US}}
service_lines:
  - {{slug: hvac, name: HVAC}}
team:
  - {{username: sam, name: Sam Setter, email: sam@example.com, role: setter, service_lines: [hvac]}}
  - {{username: mia, name: Mia Manager, email: mia@example.com, role: manager}}
  - {{username: olive, name: Olive Owner, email: olive@example.com, role: owner}}
templates:
  - {{key: ack_sms, channel: sms, approved: true, body: "{ACK}"}}
  - {{key: estimate_followup_sms, channel: sms, approved: false,
      body: "Hi {{first_name}}, any questions about the estimate?"}}
  - {{key: details_email, channel: email, approved: true,
      subject: "Your {{service}} request", body: "Hi {{first_name}}"}}
"""


@pytest.fixture
def acme(db: None) -> Business:
    business_spec_apply(business_file_parse(PLAYBOOK), actor="test")
    return Business.objects.get(slug="acme-play")


def _template(business: Business, key: str = "ack_sms") -> MessageTemplate:
    return MessageTemplate.objects.get(business=business, key=key)


def _user(username: str) -> Any:
    return get_user_model().objects.get(username=username)


def _owned_lead(business: Business, *, owner: str = "sam", first_name: str = "Pat") -> Lead:
    lead = lead_create(business, first_name=first_name, service_line=ServiceLine.objects.get(business=business))
    member = TeamMember.objects.get(business=business, user__username=owner)
    return lead_assign(lead, member, actor="test", reason="test owner")


# --- revising ---------------------------------------------------------------------


def test_a_revision_is_a_new_unapproved_version_and_the_approved_text_stays_in_force(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("sam"))

    assert (version.version, version.body, version.approved_at, version.approved_by) == (2, ACK_V2, None, None)
    template = _template(acme)
    assert (template.body, template.approved) == (ACK, True)
    assert template_for_automation(acme, "ack_sms").body == ACK


def test_the_first_revision_records_the_text_from_the_business_file_as_version_one(acme: Business) -> None:
    template_revise(_template(acme), ACK_V2, _user("sam"))

    first = MessageTemplateVersion.objects.get(template=_template(acme), version=1)
    assert (first.body, first.proposed_by, first.proposed_by_user, first.approved_by) == (
        ACK,
        "business_file",
        None,
        None,
    )


def test_proposing_the_same_text_twice_while_it_waits_is_one_version(acme: Business) -> None:
    first = template_revise(_template(acme), ACK_V2, _user("sam"))
    again = template_revise(_template(acme), ACK_V2, _user("sam"))

    assert again.pk == first.pk
    assert _template(acme).versions.count() == 2


def test_proposing_the_text_already_in_force_is_refused(acme: Business) -> None:
    with pytest.raises(TemplateError, match="already says this"):
        template_revise(_template(acme), ACK, _user("sam"))

    assert not MessageTemplateVersion.objects.exists()


def test_a_revision_with_an_unknown_placeholder_is_refused(acme: Business) -> None:
    with pytest.raises(TemplateRenderError, match=r"unknown placeholder \{coupon_code\}"):
        template_revise(_template(acme), "Use {coupon_code} today", _user("sam"))

    assert not MessageTemplateVersion.objects.exists()


def test_an_agent_may_propose_a_revision_under_its_role_name(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, "agent:sms_assistant")

    assert (version.proposed_by, version.proposed_by_user) == ("agent:sms_assistant", None)


def test_someone_outside_the_business_cannot_propose_its_text(acme: Business) -> None:
    outsider = member_create(BusinessFactory.create(slug="other"), "manager", username="otto")

    with pytest.raises(TemplateError, match="not on the team of acme-play"):
        template_revise(_template(acme), ACK_V2, outsider.user)


def test_a_bare_name_is_refused_as_the_proposer(acme: Business) -> None:
    # A username string cannot be told from a role name: people pass their user.
    with pytest.raises(TemplateError, match="pass the user"):
        template_revise(_template(acme), ACK_V2, "sam")


# --- approving --------------------------------------------------------------------


def test_approval_by_a_manager_makes_the_version_the_text_in_force(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("sam"))

    approved = template_approve(version, _user("mia"))

    assert approved.approved_by == _user("mia")
    assert approved.approved_at is not None
    template = _template(acme)
    assert (template.body, template.approved) == (ACK_V2, True)
    assert template_version_in_force(template) == approved
    assert template_for_automation(acme, "ack_sms").body == ACK_V2


def test_the_owner_may_approve_too(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("mia"))

    template_approve(version, _user("olive"))

    assert _template(acme).body == ACK_V2


def test_revising_and_approving_each_write_a_receipt(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("sam"))
    template_approve(version, _user("mia"))

    revised, approved = Receipt.objects.filter(subject=version.public_id).order_by("id")
    assert (revised.actor, revised.action) == ("sam", "template.revised")
    assert (revised.before["body"], revised.after["body"], revised.after["version"]) == (ACK, ACK_V2, 2)
    assert (approved.actor, approved.action) == ("mia", "template.approved")
    assert (approved.before["body"], approved.before["version"]) == (ACK, None)
    assert (approved.after["body"], approved.after["version"]) == (ACK_V2, 2)
    assert receipts_verify(acme) is None


def test_an_agent_role_name_cannot_approve(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, "agent:sms_assistant")
    role_name: Any = "agent:sms_assistant"

    with pytest.raises(TemplateApprovalRefused, match="a person's act"):
        template_approve(version, role_name)

    assert _template(acme).body == ACK
    assert not Receipt.objects.filter(action="template.approved").exists()


def test_the_proposer_cannot_approve_their_own_text(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("mia"))

    with pytest.raises(TemplateApprovalRefused, match="someone else must approve"):
        template_approve(version, _user("mia"))

    assert _template(acme).body == ACK


def test_a_setter_cannot_approve_the_playbook(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("mia"))

    with pytest.raises(TemplateApprovalRefused, match="not an owner or manager"):
        template_approve(version, _user("sam"))

    assert _template(acme).body == ACK


def test_a_manager_of_another_business_cannot_approve(acme: Business) -> None:
    outsider = member_create(BusinessFactory.create(slug="other"), "manager", username="otto")
    version = template_revise(_template(acme), ACK_V2, _user("sam"))

    with pytest.raises(TemplateApprovalRefused, match="not an owner or manager of acme-play"):
        template_approve(version, outsider.user)


def test_an_inactive_user_cannot_approve(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("sam"))
    mia = _user("mia")
    mia.is_active = False
    mia.save()

    with pytest.raises(TemplateApprovalRefused, match="not an active user"):
        template_approve(version, mia)


def test_approving_the_version_in_force_again_changes_nothing(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("sam"))
    first = template_approve(version, _user("mia"))
    receipts = Receipt.objects.count()

    again = template_approve(version, _user("olive"))

    assert (again.pk, again.approved_by, again.approved_at) == (first.pk, _user("mia"), first.approved_at)
    assert Receipt.objects.count() == receipts


def test_a_version_replaced_since_its_approval_cannot_be_approved_again(acme: Business) -> None:
    second = template_approve(template_revise(_template(acme), ACK_V2, _user("sam")), _user("mia"))
    template_approve(template_revise(_template(acme), ACK, _user("sam")), _user("mia"))

    with pytest.raises(TemplateApprovalRefused, match="propose its text again"):
        template_approve(second, _user("olive"))

    assert _template(acme).body == ACK


def test_approving_an_unapproved_template_makes_it_usable_for_automation(acme: Business) -> None:
    template = _template(acme, "estimate_followup_sms")
    with pytest.raises(TemplateUnavailable, match="not approved"):
        template_for_automation(acme, "estimate_followup_sms")

    version = template_revise(template, "Hi {first_name}, any questions about your estimate?", _user("sam"))
    template_approve(version, _user("mia"))

    assert template_for_automation(acme, "estimate_followup_sms").body == version.body


def test_the_text_from_the_business_file_has_no_approved_version_in_force(acme: Business) -> None:
    assert template_version_in_force(_template(acme)) is None


# --- the database enforces approval by a person -------------------------------------


def test_the_database_refuses_an_approval_by_the_proposer(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, _user("mia"))

    with pytest.raises(IntegrityError), transaction.atomic():
        MessageTemplateVersion.objects.filter(pk=version.pk).update(
            approved_by=_user("mia"), approved_at=version.created_at
        )


def test_the_database_refuses_an_approval_time_without_a_person(acme: Business) -> None:
    version = template_revise(_template(acme), ACK_V2, "agent:sms_assistant")

    with pytest.raises(IntegrityError), transaction.atomic():
        MessageTemplateVersion.objects.filter(pk=version.pk).update(approved_at=version.created_at)


def test_the_database_refuses_to_change_the_text_of_a_version(acme: Business) -> None:
    version = template_approve(template_revise(_template(acme), ACK_V2, _user("sam")), _user("mia"))

    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        MessageTemplateVersion.objects.filter(pk=version.pk).update(body="We guarantee the lowest price.")

    assert MessageTemplateVersion.objects.get(pk=version.pk).body == ACK_V2


def test_the_database_refuses_to_rewrite_an_approval(acme: Business) -> None:
    version = template_approve(template_revise(_template(acme), ACK_V2, _user("sam")), _user("mia"))

    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        MessageTemplateVersion.objects.filter(pk=version.pk).update(approved_by=_user("olive"))


# --- rendering ------------------------------------------------------------------------


def test_rendering_fills_every_lead_placeholder(acme: Business) -> None:
    lead = _owned_lead(acme)
    template = MessageTemplate(
        business=acme,
        key="all",
        channel="sms",
        body="{first_name} {last_name} / {business} / {owner_first_name} / {service}",
    )

    assert template_render(template, playbook_context(lead)) == "Pat Doe / Acme Heating & Air / Sam / HVAC"


def test_the_acknowledgement_renders_for_an_owned_lead(acme: Business) -> None:
    lead = _owned_lead(acme)

    assert template_render(_template(acme), playbook_context(lead)) == (
        "Hi Pat, this is Acme Heating & Air. We got your request and Sam will reach out shortly. Reply STOP to opt out."
    )


def test_a_lead_not_yet_routed_is_greeted_on_behalf_of_the_team(acme: Business) -> None:
    lead = lead_create(acme, first_name="Pat")

    body = template_render(_template(acme), playbook_context(lead))

    assert "our team will reach out shortly" in body and "{" not in body


def test_a_placeholder_the_lead_has_no_value_for_still_refuses_to_render(acme: Business) -> None:
    lead = lead_create(acme, first_name="Pat")

    with pytest.raises(TemplateRenderError, match=r"no value for \{service\}") as caught:
        text_render("Your {service} visit", playbook_context(lead))

    assert caught.value.placeholders == ("service",)


def test_a_blank_value_counts_as_missing() -> None:
    with pytest.raises(TemplateRenderError, match=r"no value for \{first_name\}"):
        text_render("Hi {first_name}", {"first_name": "  "})


def test_an_unknown_placeholder_is_refused_when_rendering() -> None:
    with pytest.raises(TemplateRenderError, match=r"unknown placeholder \{discount_code\}"):
        text_render("Use {discount_code}", {"discount_code": "SAVE20"})


@pytest.mark.parametrize(
    "text",
    ["Hi {first_name", "Hi first_name}", "Hi {{first_name}}", "Hi {First Name}", "Hi {0}", "Hi {first_name.upper}"],
)
def test_malformed_placeholders_are_refused(text: str) -> None:
    with pytest.raises(TemplateRenderError):
        placeholders_of(text)


def test_a_value_that_looks_like_a_placeholder_is_not_expanded_again() -> None:
    rendered = text_render("Hi {first_name} from {business}", {"first_name": "{business}", "business": "Acme"})

    assert rendered == "Hi {business} from Acme"


def test_placeholders_a_sending_step_supplies_render_when_given() -> None:
    assert text_render("Book here: {booking_url}", {"booking_url": "https://acme.example/book"}) == (
        "Book here: https://acme.example/book"
    )


# --- the automation read ---------------------------------------------------------------


def test_an_unapproved_template_is_refused_for_automation(acme: Business) -> None:
    with pytest.raises(TemplateUnavailable, match="'estimate_followup_sms' is not approved"):
        template_for_automation(acme, "estimate_followup_sms")


def test_a_missing_template_is_refused_for_automation(acme: Business) -> None:
    with pytest.raises(TemplateUnavailable, match="has no template 'price_question_sms'"):
        template_for_automation(acme, "price_question_sms")


def test_a_template_of_another_channel_is_refused_when_a_channel_is_asked(acme: Business) -> None:
    with pytest.raises(TemplateUnavailable, match="is a email template, not sms"):
        template_for_automation(acme, "details_email", channel="sms")


def test_another_business_s_template_is_not_found(acme: Business) -> None:
    other = BusinessFactory.create(slug="other")

    with pytest.raises(TemplateUnavailable):
        template_for_automation(other, "ack_sms")
