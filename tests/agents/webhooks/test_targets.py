"""Where webhooks may go: no request forgery into this machine, its cloud's
metadata service or the network around it — refused when a subscription is
saved and again when a delivery is made (a name may resolve elsewhere by
then), unless the operator allows private receivers."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone

from crm.models import Business, WebhookAttempt, WebhookDelivery, WebhookSubscription
from crm.services.webhook_targets import TargetRefused, target_check
from crm.services.webhooks import WebhookRefused, webhook_secret_new, webhook_subscription_save
from scripts.webhook_receiver import Receiver, tls_files
from tests.factories import lead_create
from tests.helpers.webhooks import deliver, subscribe

REFUSED = [
    ("https://127.0.0.1/hook", "loopback"),
    ("https://127.8.9.10:8443/hook", "loopback"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://10.1.2.3/hook", "private"),
    ("https://192.168.0.10/hook", "private"),
    ("https://localhost/hook", "localhost resolves to"),  # a name that resolves to loopback
    ("https://[::1]/hook", "loopback"),
    ("https://[::ffff:127.0.0.1]/hook", "loopback"),
    ("https://[fe80::1]/hook", "link-local"),
    ("https://224.0.0.1/hook", "multicast"),
    ("https://0.0.0.0/hook", "unspecified"),
    ("https://100.64.0.1/hook", "not public"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "why"), REFUSED)
def test_a_private_target_is_refused_at_save(business: Business, url: str, why: str) -> None:
    with pytest.raises(WebhookRefused, match=why):
        subscribe(business, url)
    assert not WebhookSubscription.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "why"), REFUSED[:6])
def test_a_private_target_is_accepted_when_the_operator_allows_it(business: Business, url: str, why: str) -> None:
    with override_settings(WEBHOOK_ALLOW_PRIVATE=True):
        assert subscribe(business, url).url == url


@pytest.mark.django_db
def test_live_mode_takes_https_only_and_no_credentials(business: Business) -> None:
    with override_settings(SEND_MODE="live"), pytest.raises(WebhookRefused, match="must be https"):
        subscribe(business, "http://93.184.215.14/hook")
    with pytest.raises(WebhookRefused, match="user name or password"):
        subscribe(business, "https://agency:pw@93.184.215.14/hook")
    # Dry run records what would be sent: a plain http receiver may be set up meanwhile.
    assert subscribe(business, "http://93.184.215.14/hook").url == "http://93.184.215.14/hook"


@pytest.mark.django_db
def test_a_public_address_passes_and_a_name_that_does_not_resolve_yet_is_left_to_delivery(business: Business) -> None:
    assert target_check("https://93.184.215.14:8443/x?y=1").addresses == ("93.184.215.14",)
    assert subscribe(business, "https://hooks.agency.invalid/leadops").status == "active"


@pytest.mark.django_db
def test_unknown_events_and_malformed_secrets_are_refused(business: Business) -> None:
    with pytest.raises(WebhookRefused, match=r"unknown event type 'lead\.won'"):
        subscribe(business, "https://93.184.215.14/hook", events=("lead.won",))
    with pytest.raises(WebhookRefused, match="starts with whsec_"):
        webhook_subscription_save(
            business=business, url="https://93.184.215.14/hook", events=["*"], secret="s3cret", actor="t"
        )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_target_refused_at_delivery_is_never_called(business: Business, host: str) -> None:
    """Saved while private receivers were allowed (or, as with DNS rebinding,
    while the name resolved elsewhere): each delivery checks again, and
    connects to nothing it refused."""
    secret = webhook_secret_new()
    with Receiver(secret) as receiver:
        url = receiver.url.replace("localhost", host)
        with override_settings(WEBHOOK_ALLOW_PRIVATE=True):
            subscribe(business, url, secret=secret)
        lead_create(business)
        with override_settings(SEND_MODE="live", WEBHOOK_CA_BUNDLE=tls_files().ca):
            deliver(now=timezone.now())

    assert receiver.received == []
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (WebhookDelivery.Status.PENDING, 1)
    [attempt] = WebhookAttempt.objects.filter(delivery=delivery)
    assert attempt.outcome == "refused" and "loopback" in attempt.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "why"),
    [("https://169.254.169.254/latest/meta-data/", "link-local"), ("https://10.1.2.3/hook", "private")],
)
def test_metadata_and_private_addresses_saved_while_allowed_are_refused_at_delivery(
    business: Business, url: str, why: str
) -> None:
    with override_settings(WEBHOOK_ALLOW_PRIVATE=True):
        subscribe(business, url)
    lead_create(business)
    with override_settings(SEND_MODE="live"):
        deliver(now=timezone.now())

    [attempt] = WebhookAttempt.objects.all()
    assert (attempt.outcome, attempt.status_code) == ("refused", None) and why in attempt.error


@pytest.mark.django_db(transaction=True)
def test_a_redirect_is_not_followed(business: Business) -> None:
    secret = webhook_secret_new()
    with (
        override_settings(SEND_MODE="live", WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=tls_files().ca),
        Receiver(secret) as elsewhere,
        Receiver(secret, answer=lambda received: 307) as redirecting,
    ):
        subscribe(business, redirecting.url, secret=secret)
        lead_create(business)
        deliver()

    assert len(redirecting.received) == 1 and elsewhere.received == []
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.last_status_code, delivery.last_error) == ("pending", 307, "HTTP 307")


def test_the_check_itself_needs_no_database() -> None:
    with override_settings(WEBHOOK_ALLOW_PRIVATE=False), pytest.raises(TargetRefused, match="no host"):
        target_check("https:///hook")
