"""The business file names the Meta ad account whose spend is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from crm.models import ConversionAccount
from crm.services.business_file import BusinessFileError, business_file_load

pytestmark = pytest.mark.django_db

FILE = """\
business: {{slug: spend-client, name: Spend Client, timezone: America/Chicago}}
conversions:
  meta:
    dataset_id: "998877665544332"
    ad_account_id: {account}
    events: {{paid: Purchase}}
"""


def load(tmp_path: Path, account: str) -> None:
    path = tmp_path / "business.yaml"
    path.write_text(FILE.format(account=account))
    business_file_load(path)


@pytest.mark.parametrize("written", ['"act_555000111222"', '"555000111222"', "555000111222"])
def test_the_meta_ad_account_is_kept_as_digits_however_it_is_written(tmp_path: Path, written: str) -> None:
    load(tmp_path, written)
    meta = ConversionAccount.objects.get(business__slug="spend-client", platform="meta")
    assert meta.config["ad_account_id"] == "555000111222"


def test_an_ad_account_that_is_not_one_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(BusinessFileError, match="ad account id") as refused:
        load(tmp_path, '"my-ads"')
    assert refused.value.line == 5 and "my-ads" in refused.value.reason
