"""Factories for tests. Records with rules (leads, receipts) are built through
services, never by poking status fields."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from crm.models import Business, Lead, Role, ServiceLine, TeamMember
from crm.services.records import contact_create, lead_open


class BusinessFactory(factory.django.DjangoModelFactory[Business]):
    class Meta:
        model = Business
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"biz-{n}")
    name = factory.Faker("company")
    timezone = "America/Chicago"
    region = "US"


class UserFactory(factory.django.DjangoModelFactory[Any]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    is_staff = True
    password = factory.django.Password("pw-for-tests-1")


class ServiceLineFactory(factory.django.DjangoModelFactory[ServiceLine]):
    class Meta:
        model = ServiceLine

    business = factory.SubFactory(BusinessFactory)
    slug = factory.Sequence(lambda n: f"line-{n}")
    # Unique per business (case-insensitive, crm_serviceline_unique_name): a
    # random word repeats now and then, and the second line of a test failed.
    name = factory.Sequence(lambda n: f"Line {n}")


def member_create(business: Business, role: str = Role.SETTER, username: str | None = None, **kw: Any) -> TeamMember:
    user = UserFactory.create(**({"username": username} if username else {}))
    user.groups.add(Group.objects.get(name=role))
    return TeamMember.objects.create(
        business=business, user=user, role=role, display_name=kw.pop("display_name", user.username), **kw
    )


def lead_create(
    business: Business,
    *,
    first_name: str = "Pat",
    last_name: str = "Doe",
    phone: str = "+12125550147",
    email: str = "",
    service_line: ServiceLine | None = None,
    actor: str = "test",
) -> Lead:
    contact = contact_create(
        business=business,
        actor=actor,
        first_name=first_name,
        last_name=last_name,
        phones=[phone] if phone else [],
        emails=[email] if email else [],
    )
    return lead_open(contact=contact, actor=actor, service_line=service_line, touch={"channel": "form"})
