"""An owner forgets a person from the Contact admin, in a real browser."""

from __future__ import annotations

import pytest

from crm.models import Contact, Receipt, Role
from crm.services.receipts import receipts_verify
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-1"


def test_an_owner_types_the_contacts_id_and_the_person_is_forgotten(live_server, browser_context, tmp_path):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air")
    member_create(business, Role.OWNER, username="olivia")
    contact = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147").contact
    base = live_server.url

    page = browser_context.new_page()
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "olivia")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    page.goto(f"{base}/admin/crm/contact/")
    page.check(f"#result_list input[name=_selected_action][value='{contact.pk}']")
    page.select_option("select[name=action]", "contact_forget_action")
    page.click("button[name=index]")
    page.wait_for_selector("#forget-form")
    page.screenshot(path=str(tmp_path / "confirm.png"))

    page.fill("#id_confirm", "cont_not_this_one")
    page.click("#forget-form input[type=submit]")
    assert "That is not this contact's id" in page.locator("#forget-form").inner_text()
    page.fill("#id_confirm", contact.public_id)
    page.fill("#id_reason", "asked on the phone")
    page.click("#forget-form input[type=submit]")
    page.wait_for_selector(".messagelist")

    assert f"Forgot {contact.public_id}: " in page.locator(".messagelist").inner_text()
    forgotten = Contact.objects.get(pk=contact.pk)
    assert forgotten.name == "" and not forgotten.points.filter(value="+12125550147").exists()
    assert Receipt.objects.get(action="contact.forgotten").actor == "olivia"
    assert receipts_verify() is None
