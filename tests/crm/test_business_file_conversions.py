"""The business file's `conversions` section: a Google Ads and a Meta account
per business, their credentials encrypted at rest and never shown back (the
environment's where the file names none); errors name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

from crm.models import Business, ConversionAccount, Receipt, Role
from crm.services.business_file import BusinessFileError, business_file_load
from crm.services.conversions import account_secret_sources, account_secrets
from tests.factories import member_create

pytestmark = pytest.mark.django_db

TOKEN = "EAAconversionsfiletoken000000001"
FILE = f"""\
business: {{slug: agency-client, name: Agency Client, timezone: America/Chicago}}
conversions:
  google:
    customer_id: "123-456-7890"
    login_customer_id: "111-222-3333"
    timezone: America/New_York
    enhanced_conversions: true
    refresh_token: "1//file-refresh-token"
    actions:
      booked: "customers/1234567890/conversionActions/222"
      paid: "customers/1234567890/conversionActions/333"
  meta:
    dataset_id: "998877665544332"
    access_token: "{TOKEN}"
    events: {{booked: Schedule, paid: Purchase}}
"""


def load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "business.yaml"
    path.write_text(text)
    business_file_load(path)


def test_accounts_load_with_their_mapping_and_credentials_encrypted_and_write_only(
    tmp_path: Path, settings: object
) -> None:
    settings.GOOGLE_ADS_DEVELOPER_TOKEN = "env-dev-token"  # type: ignore[attr-defined]
    load(tmp_path, FILE)

    business = Business.objects.get(slug="agency-client")
    google = ConversionAccount.objects.get(business=business, platform="google")
    assert google.config == {
        "api": "data_manager",  # a new account: the API Google opens to it
        "customer_id": "1234567890",
        "login_customer_id": "1112223333",
        "timezone": "America/New_York",
        "enhanced_conversions": True,
        "actions": {
            "booked": "customers/1234567890/conversionActions/222",
            "paid": "customers/1234567890/conversionActions/333",
        },
    }
    assert google.mapped("paid").endswith("/333") and google.mapped("won") == ""
    secrets = account_secrets(google)
    assert secrets["refresh_token"] == "1//file-refresh-token"
    assert secrets["developer_token"] == "env-dev-token"
    assert account_secret_sources(google) == {
        "developer_token": "not needed",  # the Data Manager API takes none
        "client_id": "missing",
        "client_secret": "missing",
        "refresh_token": "business file",
    }
    meta = ConversionAccount.objects.get(business=business, platform="meta")
    assert meta.config == {"dataset_id": "998877665544332", "events": {"booked": "Schedule", "paid": "Purchase"}}
    with connection.cursor() as cursor:
        cursor.execute("SELECT secrets FROM crm_conversionaccount WHERE id = %s", [meta.pk])
        stored = cursor.fetchone()[0]
    assert TOKEN not in stored and stored.startswith("gAAAA")  # a Fernet token
    receipts = list(Receipt.objects.filter(action="conversion.account_saved").values_list("reason", "after"))
    assert len(receipts) == 2 and TOKEN not in str(receipts) and "file-refresh-token" not in str(receipts)

    # The same file again changes nothing; without the token, the one stored stays.
    load(tmp_path, FILE)
    load(tmp_path, FILE.replace(f'    access_token: "{TOKEN}"\n', ""))
    assert account_secrets(ConversionAccount.objects.get(pk=meta.pk))["access_token"] == TOKEN
    assert Receipt.objects.filter(action="conversion.account_saved").count() == 2

    # The admin says where each credential comes from, never its value.
    owner = member_create(business, Role.OWNER, username="olivia")
    get_user_model().objects.filter(pk=owner.user_id).update(is_staff=True)
    client = Client()
    client.force_login(owner.user)
    page = client.get(reverse("admin:crm_conversionaccount_change", args=[meta.pk])).content.decode()
    assert "access_token: business file" in page and TOKEN not in page


@pytest.mark.parametrize(
    ("change", "line", "says"),
    [
        (('"123-456-7890"', '"12-34"'), 4, "customer id like 123-456-7890"),
        (('"customers/1234567890/conversionActions/222"', '"action-222"'), 10, "conversion action like"),
        (("      booked:", "      sold:"), 10, "unknown key 'sold'"),
        (('"998877665544332"', '"pixel-1"'), 13, "digits only"),
        (("    enhanced_conversions: true\n", "    enhanced_conversions: true\n    password: x\n"), 8, "unknown key"),
    ],
)
def test_a_bad_conversions_section_is_refused_with_its_line(
    tmp_path: Path, change: tuple[str, str], line: int, says: str
) -> None:
    with pytest.raises(BusinessFileError) as refused:
        load(tmp_path, FILE.replace(*change))
    assert refused.value.line == line and says in refused.value.reason
    assert not ConversionAccount.objects.exists()
