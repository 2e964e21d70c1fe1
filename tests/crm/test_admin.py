"""The admin as the back office: scoping, search, filters, timeline, actions, query counts."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from crm.models import Lead, Receipt, Role, Source
from crm.services import lead_sync, records
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/crm/lead/"


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def two_setters(business):
    return member_create(business, Role.SETTER, username="sam"), member_create(business, Role.SETTER, username="sara")


def owned_lead(business, owner, **kw) -> Lead:
    lead = lead_create(business, **kw)
    return lead_sync.lead_assign(lead, owner, actor="test", reason="setup")


def ids_on_changelist(client: Client, query: str = "") -> set[str]:
    response = client.get(CHANGELIST + query)
    assert response.status_code == 200
    return {lead.public_id for lead in response.context["cl"].result_list}


def test_setter_sees_only_the_leads_they_own(business, two_setters):
    sam, sara = two_setters
    mine = owned_lead(business, sam, phone="+12125550101")
    theirs = owned_lead(business, sara, phone="+12125550102")
    client = login(sam.user)
    assert ids_on_changelist(client) == {mine.public_id}
    response = client.get(reverse("admin:crm_lead_change", args=[theirs.pk]), follow=True)
    assert theirs.public_id not in response.content.decode()
    assert any("doesn’t exist" in str(m) or "does not exist" in str(m) for m in get_messages(response.wsgi_request))


def test_manager_sees_the_whole_business_and_nothing_of_another(business, other_business, two_setters, manager):
    sam, sara = two_setters
    leads = {
        owned_lead(business, sam, phone="+12125550101").public_id,
        owned_lead(business, sara, phone="+12125550102").public_id,
    }
    leads.add(lead_create(business, phone="+12125550103").public_id)  # unowned: the manager still sees it
    foreign = lead_create(other_business, phone="+12125550104")
    client = login(manager.user)
    assert ids_on_changelist(client) == leads
    response = client.get(reverse("admin:crm_lead_change", args=[foreign.pk]), follow=True)
    assert foreign.public_id not in response.content.decode()


def test_user_without_membership_sees_no_leads(business, two_setters):
    owned_lead(business, two_setters[0])
    outsider = member_create(business, Role.SETTER, username="ghost")
    outsider.delete()  # the user keeps its group, but no longer belongs to the business
    # Without a membership there is no role anywhere: the list itself is refused.
    assert login(outsider.user).get(CHANGELIST).status_code == 403


@pytest.mark.parametrize("typed", ["(212) 555-0147", "212.555.0147", "+1 212 555 0147", "2125550147"])
def test_search_finds_a_phone_typed_in_any_format(business, manager, typed):
    wanted = lead_create(business, phone="+12125550147")
    lead_create(business, phone="+12125550199", first_name="Other")
    assert ids_on_changelist(login(manager.user), f"?q={typed}") == {wanted.public_id}


def test_search_by_email_name_and_public_id(business, manager):
    wanted = lead_create(business, first_name="Rosa", last_name="Diaz", email="Rosa.Diaz@Example.com")
    lead_create(business, first_name="Other", last_name="Person", phone="+12125550199")
    client = login(manager.user)
    for term in [
        "rosa.diaz@example.com",
        "ROSA.DIAZ@EXAMPLE.COM",
        "Diaz",
        "Rosa Diaz",
        wanted.public_id,
        wanted.contact.public_id,
    ]:
        assert ids_on_changelist(client, f"?q={term}") == {wanted.public_id}, term


def test_filters_by_stage_owner_source_and_business(business, other_business, two_setters, manager):
    sam, sara = two_setters
    site = Source.objects.create(business=business, key="site", provider="website")
    a = owned_lead(business, sam, phone="+12125550101")
    b = owned_lead(business, sara, phone="+12125550102")
    lead_sync.lead_transition(b, "contacted", actor="test", reason="called")
    records.touch_add(lead=a, source=site, channel="form")
    client = login(manager.user)
    assert ids_on_changelist(client, "?stage=contacted") == {b.public_id}
    assert ids_on_changelist(client, f"?owner={sam.public_id}") == {a.public_id}
    assert ids_on_changelist(client, "?source=site") == {a.public_id}
    assert ids_on_changelist(client, f"?business={business.public_id}") == {a.public_id, b.public_id}


def test_lead_page_shows_one_timeline_in_time_order(business, manager):
    lead = owned_lead(business, manager, phone="+12125550101")
    now = timezone.now()
    records.task_create(lead=lead, title="Call back", due_at=now + timedelta(hours=1), actor="mia")
    records.appointment_record(
        lead=lead, starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=1), actor="mia"
    )
    payment = records.payment_record(lead=lead, amount=Decimal("120.00"), currency="USD", actor="mia", received_at=now)
    records.refund_record(payment=payment, amount=Decimal("20.00"), actor="mia", refunded_at=now + timedelta(seconds=1))
    response = login(manager.user).get(reverse("admin:crm_lead_change", args=[lead.pk]))
    timeline = response.context["timeline"]
    kinds = {entry.kind for entry in timeline}
    assert {"touch", "task", "appointment", "payment", "refund", "receipt"} <= kinds
    assert [e.at for e in timeline] == sorted(e.at for e in timeline)
    html = response.content.decode()
    assert 'id="timeline"' in html and payment.public_id in html


def test_stage_action_moves_allowed_leads_and_reports_forbidden_ones(business, manager):
    movable = owned_lead(business, manager, phone="+12125550101")
    stuck = lead_create(business, phone="+12125550102")  # new: cannot jump to booked
    client = login(manager.user)
    before = Receipt.objects.count()
    response = client.post(CHANGELIST, {"action": "move_to_contacted", "_selected_action": [movable.pk]}, follow=True)
    assert response.status_code == 200
    movable.refresh_from_db()
    assert movable.stage == "contacted"
    assert Receipt.objects.count() == before + 1
    response = client.post(CHANGELIST, {"action": "move_to_booked", "_selected_action": [stuck.pk]}, follow=True)
    errors = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("cannot move from new to booked" in e for e in errors)
    stuck.refresh_from_db()
    assert stuck.stage == "new"
    assert Receipt.objects.count() == before + 1


def test_stage_form_on_the_lead_page_calls_crm_sync(business, two_setters):
    sam, _ = two_setters
    lead = owned_lead(business, sam)
    client = login(sam.user)
    url = reverse("admin:crm_lead_stage", args=[lead.pk])
    client.post(url, {"stage": "contacted", "reason": "left a voicemail"})
    lead.refresh_from_db()
    assert lead.stage == "contacted"
    receipt = lead.receipts.order_by("-id").first()
    assert (receipt.actor, receipt.reason, receipt.after) == ("sam", "left a voicemail", {"stage": "contacted"})


def test_setter_cannot_change_a_lead_they_do_not_own_by_posting_its_url(business, two_setters):
    sam, sara = two_setters
    theirs = owned_lead(business, sara)
    response = login(sam.user).post(reverse("admin:crm_lead_stage", args=[theirs.pk]), {"stage": "lost", "reason": "x"})
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.stage == "assigned"


def test_lead_fields_are_read_only_in_the_change_form(business, manager):
    lead = owned_lead(business, manager)
    client = login(manager.user)
    client.post(reverse("admin:crm_lead_change", args=[lead.pk]), {"stage": "won", "next_action": "hacked"})
    lead.refresh_from_db()
    assert (lead.stage, lead.next_action) == ("assigned", "")


def test_receipts_cannot_be_changed_or_deleted_in_the_admin(business, manager):
    lead = owned_lead(business, manager)
    receipt = lead.receipts.first()
    client = login(manager.user)
    assert client.get(reverse("admin:crm_receipt_change", args=[receipt.pk])).status_code == 200
    client.post(reverse("admin:crm_receipt_delete", args=[receipt.pk]), {"post": "yes"})
    assert Receipt.objects.filter(pk=receipt.pk).exists()


def changelist_queries(client: Client) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(CHANGELIST).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("role", [Role.MANAGER, Role.SETTER])
def test_lead_changelist_runs_a_constant_number_of_queries(business, role):
    user = member_create(business, role, username=f"{role}-viewer")
    site = Source.objects.create(business=business, key="site", provider="website")

    def add(n: int, offset: int) -> None:
        for i in range(n):
            lead = owned_lead(business, user, phone=f"+1212555{offset + i:04d}", email=f"p{offset + i}@example.com")
            records.touch_add(lead=lead, source=site, channel="form")

    client = login(user.user)
    add(3, 0)
    few = changelist_queries(client)
    add(30, 100)
    many = changelist_queries(client)
    assert few == many, (few, many)
    assert few < 20


@pytest.mark.parametrize(
    "model",
    [
        "contact",
        "receipt",
        "message",
        "task",
        "appointment",
        "payment",
        "refund",
        "inboundevent",
        "teammember",
        "consentevent",
    ],
)
def test_every_record_list_opens_for_a_manager(business, manager, model):
    owned_lead(business, manager)
    assert login(manager.user).get(f"/admin/crm/{model}/").status_code == 200


def test_every_relation_a_record_list_shows_is_joined():
    # A relation shown in a list but not joined costs a query per row.
    from django.apps import apps
    from django.contrib import admin

    for model in apps.get_app_config("crm").get_models():
        if not admin.site.is_registered(model):
            continue
        model_admin = admin.site.get_model_admin(model)
        joined = model_admin.list_select_related
        if isinstance(joined, bool):
            continue
        shown = [f.name for f in model._meta.fields if f.is_relation and f.name in model_admin.list_display]
        missing = [name for name in shown if not any(j == name or j.startswith(f"{name}__") for j in joined)]
        assert not missing, (model.__name__, missing)


def test_role_groups_hold_their_permissions_after_migrating_a_fresh_database():
    # The test database was migrated from nothing, as a newcomer's is.
    from django.contrib.auth.models import Group

    from crm.roles import ROLE_PERMISSIONS

    for role, codenames in ROLE_PERMISSIONS.items():
        held = set(Group.objects.get(name=role).permissions.values_list("codename", flat=True))
        assert held == set(codenames), role
