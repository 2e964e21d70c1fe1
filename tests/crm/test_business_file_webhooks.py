"""The business file's `webhooks` section: subscriptions with their events
and a secret encrypted at rest; errors name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from crm.models import Business, Receipt, WebhookSubscription
from crm.services.business_file import BusinessFileError, business_file_load
from crm.services.webhooks import webhook_secret_new

pytestmark = pytest.mark.django_db

SECRET = webhook_secret_new()
FILE = f"""\
business: {{slug: agency-client, name: Agency Client, timezone: America/Chicago}}
webhooks:
  - url: "https://93.184.215.14/leadops"
    events: [payment.recorded, refund.recorded]
    secret: "{SECRET}"
  - {{url: "https://hooks.agency.invalid/all", events: ["*"], secret: "{SECRET}", description: reporting sheet}}
"""


def load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "business.yaml"
    path.write_text(text)
    business_file_load(path)


def test_webhooks_load_with_their_events_and_a_secret_encrypted_at_rest(tmp_path: Path) -> None:
    load(tmp_path, FILE)

    business = Business.objects.get(slug="agency-client")
    first, second = WebhookSubscription.objects.filter(business=business).order_by("url")
    assert (first.url, first.events) == ("https://93.184.215.14/leadops", ["payment.recorded", "refund.recorded"])
    assert (second.events, second.description) == (["*"], "reporting sheet")
    assert first.secret == SECRET and first.status == "active"
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM crm_webhooksubscription WHERE id = %s", [first.pk])
        stored = cursor.fetchone()[0]
    assert SECRET not in stored and stored.startswith("gAAAA")  # a Fernet token
    receipts = Receipt.objects.filter(action="webhook.subscription_saved").values_list("after", flat=True)
    assert len(receipts) == 2 and SECRET not in str(list(receipts))

    # Again: nothing changes; without the secret: the one set (maybe in the admin) stays.
    load(tmp_path, FILE)
    load(tmp_path, FILE.replace(f'    secret: "{SECRET}"\n', "", 1))
    first.refresh_from_db()
    assert first.secret == SECRET
    assert Receipt.objects.filter(action="webhook.subscription_saved").count() == 2

    load(tmp_path, FILE.replace("[payment.recorded, refund.recorded]", "[payment.recorded]"))
    first.refresh_from_db()
    assert first.events == ["payment.recorded"]


@pytest.mark.parametrize(
    ("old", "new", "line", "reason"),
    [
        ("[payment.recorded, refund.recorded]", "[payment.recorded, lead.won]", 4, "unknown event type 'lead.won'"),
        (f'    secret: "{SECRET}"', '    secret: "hunter2"', 5, "starts with whsec_"),
        ("https://93.184.215.14/leadops", "https://169.254.169.254/latest", 3, "a link-local address"),
        ("https://93.184.215.14/leadops", "ftp://93.184.215.14/x", 3, "must be an http(s) URL"),
        ("[payment.recorded, refund.recorded]", "[]", 4, "'events'"),
    ],
    # Named by the reason: the secret is random, and pytest-xdist's workers
    # must collect the same test ids.
    ids=["unknown event", "bad secret", "link-local", "not http", "no events"],
)
def test_a_bad_webhook_is_refused_with_its_line(tmp_path: Path, old: str, new: str, line: int, reason: str) -> None:
    assert old in FILE
    with pytest.raises(BusinessFileError) as refused:
        load(tmp_path, FILE.replace(old, new, 1))
    assert f"line {line}: " in str(refused.value) and reason in str(refused.value)
    assert not WebhookSubscription.objects.exists()
