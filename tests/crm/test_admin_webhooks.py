"""Webhooks in the admin: subscriptions with a write-only secret and the
address check, the delivery log with its attempts, replay, pause and resume."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.webhooks.delivery import webhooks_pump
from crm.models import Business, Receipt, Role, WebhookDelivery, WebhookSubscription
from crm.services.webhooks import webhook_secret_new, webhook_subscription_pause
from tests.factories import lead_create, member_create
from tests.helpers.webhooks import subscribe

pytestmark = pytest.mark.django_db

ADD = reverse("admin:crm_webhooksubscription_add")
URL = "https://93.184.215.14/leadops"


def logged_in(business: Business, role: str = Role.OWNER, username: str = "olivia") -> Client:
    client = Client()
    client.force_login(member_create(business, role, username=username).user)
    return client


def test_an_owner_adds_a_webhook_whose_generated_secret_is_shown_once(business: Business) -> None:
    client = logged_in(business)
    form = {"business": business.pk, "url": URL, "events_wanted": ["payment.recorded", "refund.recorded"]}

    response = client.post(ADD, {**form, "generate_secret": "on"}, follow=True)

    subscription = WebhookSubscription.objects.get()
    assert (subscription.url, subscription.events) == (URL, ["payment.recorded", "refund.recorded"])
    assert subscription.secret.startswith("whsec_")
    assert subscription.secret in response.content.decode()  # the save message, this once
    page = client.get(reverse("admin:crm_webhooksubscription_change", args=[subscription.pk])).content.decode()
    assert subscription.secret not in page and "set" in page
    assert Receipt.objects.filter(action="webhook.subscription_saved", subject=subscription.public_id).exists()


def test_an_owner_changes_the_events_and_keeps_the_secret(business: Business) -> None:
    client = logged_in(business)
    subscription = subscribe(business, URL)
    secret = subscription.secret

    client.post(
        reverse("admin:crm_webhooksubscription_change", args=[subscription.pk]),
        {"url": URL, "events_wanted": ["lead.created"], "description": "sheet"},
    )

    subscription.refresh_from_db()
    assert (subscription.events, subscription.description, subscription.secret) == (["lead.created"], "sheet", secret)
    saved = Receipt.objects.filter(action="webhook.subscription_saved", subject=subscription.public_id)
    assert saved.order_by("-id").first().reason == "events, description"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("https://localhost/hook", "localhost resolves to"),
        ("https://10.0.0.7/hook", "private"),
    ],
)
def test_the_form_refuses_a_private_target(business: Business, url: str, error: str) -> None:
    response = logged_in(business).post(
        ADD, {"business": business.pk, "url": url, "events_wanted": ["*"], "generate_secret": "on"}
    )
    assert response.status_code == 200 and error in response.content.decode()
    assert not WebhookSubscription.objects.exists()


def test_a_new_webhook_needs_a_secret_and_a_typed_one_must_be_standard(business: Business) -> None:
    client = logged_in(business)
    form = {"business": business.pk, "url": URL, "events_wanted": ["*"]}
    assert "needs its secret" in client.post(ADD, form).content.decode()
    assert "starts with whsec_" in client.post(ADD, {**form, "replace_secret": "hunter2"}).content.decode()
    secret = webhook_secret_new()
    client.post(ADD, {**form, "replace_secret": secret})
    assert WebhookSubscription.objects.get().secret == secret


def test_the_delivery_log_shows_attempts_and_replays(business: Business) -> None:
    client = logged_in(business)
    subscription = subscribe(business, URL)
    lead = lead_create(business)
    webhooks_pump(seconds=10)  # dry run: recorded, not sent
    delivery = WebhookDelivery.objects.get(subscription=subscription)

    listing = client.get(reverse("admin:crm_webhookdelivery_changelist")).content.decode()
    assert delivery.public_id in listing and "lead.created" in listing
    page = client.get(reverse("admin:crm_webhookdelivery_change", args=[delivery.pk])).content.decode()
    assert "Dry Run" in page and "webhook-signature" in page and lead.public_id in page

    client.post(
        reverse("admin:crm_webhookdelivery_changelist"),
        {"action": "replay", "_selected_action": [delivery.pk]},
    )
    delivery.refresh_from_db()
    assert delivery.status == "pending"
    assert Receipt.objects.filter(action="webhook.replayed", subject=delivery.public_id, actor="olivia").exists()


def test_a_manager_resumes_a_paused_webhook_and_a_setter_sees_none(business: Business) -> None:
    subscription = subscribe(business, URL)
    webhook_subscription_pause(subscription, actor="test", reason="receiver moving")
    manager = logged_in(business, Role.MANAGER, "mia")
    changelist = reverse("admin:crm_webhooksubscription_changelist")

    manager.post(changelist, {"action": "webhooks_resume", "_selected_action": [subscription.pk]})

    subscription.refresh_from_db()
    assert subscription.status == "active"
    assert logged_in(business, Role.SETTER, "sam").get(changelist).status_code == 403
