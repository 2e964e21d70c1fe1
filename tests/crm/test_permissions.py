"""The permission table itself: per membership, never merged; unknown names
refused; and docs/security.md shows exactly the table the code enforces."""

from __future__ import annotations

from pathlib import Path

import pytest

from crm.models import Role
from crm.permissions import PERMISSIONS, can, can_anywhere, permission_table_markdown
from tests.factories import member_create

pytestmark = pytest.mark.django_db
DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_a_users_role_is_the_one_of_the_business_asked_about(business, other_business):
    owner_here = member_create(business, Role.OWNER, username="olivia")
    member_create(other_business, Role.SETTER, username="olivia")
    user = owner_here.user
    assert can(user, "settings.edit", business.pk)
    assert not can(user, "settings.edit", other_business.pk)
    assert can(user, "message.send", other_business.pk)
    assert can_anywhere(user, "settings.edit")


def test_no_membership_means_no_permission(business):
    stranger = member_create(business, Role.OWNER, username="gone")
    stranger.is_active = False
    stranger.save(update_fields=["is_active"])
    assert not can_anywhere(stranger.user, "lead.view")


def test_an_unknown_permission_is_an_error_not_a_refusal(business, setter):
    with pytest.raises(KeyError):
        can(setter.user, "lead.teleport", business.pk)


def test_technicians_never_read_the_conversation_or_the_money():
    for record in ("message", "call", "receipt", "payment", "invoice", "estimate", "refund", "leadtouch"):
        assert Role.TECHNICIAN not in PERMISSIONS[f"{record}.view"], record


def test_the_security_doc_shows_the_table_the_code_enforces():
    assert permission_table_markdown() in DOC.read_text(), "regenerate the table in docs/security.md"
