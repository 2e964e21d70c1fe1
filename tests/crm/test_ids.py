from __future__ import annotations

import re

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from crm.ids import new_public_id
from crm.models import Business, Contact, Lead
from tests.factories import lead_create

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
PUBLIC_ID = re.compile(r"^(?P<prefix>[a-z]+)_(?P<body>[0-9A-HJKMNP-TV-Z]{26})$")


def _body_millis(public_id: str) -> int:
    value = 0
    for char in public_id.split("_", 1)[1]:
        value = value * 32 + CROCKFORD.index(char)
    return value >> 80


def test_a_public_id_is_its_prefix_and_26_crockford_characters() -> None:
    match = PUBLIC_ID.match(new_public_id("lead"))

    assert match is not None
    assert match["prefix"] == "lead"
    assert not set(match["body"]) & set("ILOU")


def test_a_public_id_begins_with_its_creation_time_so_ids_sort_by_creation() -> None:
    before = int(timezone.now().timestamp() * 1000)
    public_id = new_public_id("cont")
    after = int(timezone.now().timestamp() * 1000)

    # One millisecond of slack for float rounding between the two clocks' readings.
    assert before - 1 <= _body_millis(public_id) <= after + 1


def test_ten_thousand_public_ids_are_all_different() -> None:
    ids = [new_public_id("msg") for _ in range(10_000)]

    assert len(set(ids)) == 10_000
    assert all(PUBLIC_ID.match(i) for i in ids)


def test_a_public_id_is_assigned_when_the_instance_is_built() -> None:
    first, second = Contact(), Contact()

    assert first.public_id.startswith("cont_")
    assert second.public_id.startswith("cont_")
    assert first.public_id != second.public_id


def test_saving_a_record_again_keeps_its_public_id(business: Business) -> None:
    contact = Contact(business=business, first_name="Pat")
    built_with = contact.public_id
    contact.save()
    contact.first_name = "Patricia"
    contact.save()
    contact.refresh_from_db()

    assert contact.public_id == built_with
    assert Contact.objects.get(pk=contact.pk).public_id == built_with


def test_changing_a_public_id_through_the_orm_is_refused_by_the_database(business: Business) -> None:
    lead = lead_create(business)
    original = lead.public_id
    lead.public_id = new_public_id("lead")

    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        lead.save()

    assert Lead.objects.get(pk=lead.pk).public_id == original
