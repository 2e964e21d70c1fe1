"""The role matrix: every URL the project serves, for every demo role, an
outsider and an anonymous client, read and write, against an expected status.

The URL list is read from the resolver, so a new URL without an entry in
`MATRIX` fails `test_every_url_the_project_serves_has_an_entry`. Each request
runs in a savepoint that is rolled back, so a write by one role never changes
what the next one meets. Set `MATRIX_PRINT=1` to print the statuses observed
(in the table's own format) when adding a URL; then read every line before
pasting it: the table is the specification, not a recording.

Roles, in column order: owner (olivia), manager (mia), setter (sam, who owns
the sample lead), technician (tom, assigned to its visit and job), outsider
(otto, a manager of another business), anonymous.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Q
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice
from rest_framework.authtoken.models import Token

from agents.conversions.delivery import conversions_pump
from agents.reviews.pull import review_upsert
from agents.webhooks.delivery import webhooks_pump
from approvals.models import ApprovalRequest
from approvals.services import approval_request_open
from crm import models as m
from crm.services.consent import consent_record
from crm.services.records import task_create
from crm.services.timers import timer_schedule
from devtools.demo import demo_load
from tests.factories import BusinessFactory, member_create

ROLES = ("owner", "manager", "setter", "technician", "outsider", "anonymous")
USERNAMES = {"owner": "olivia", "manager": "mia", "setter": "sam", "technician": "tom", "outsider": "otto"}

# route -> (sample, GET statuses, POST statuses), one status per role in ROLES order; "-" skips a method.
# A sample names the record whose id fills the route's parameter (see `Samples.fill`).
MATRIX: dict[str, tuple[str, str, str]] = {
    "": ("none", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "healthz/": ("none", "200 200 200 200 200 200", "200 200 200 200 200 200"),
    "favicon.ico": ("none", "301 301 301 301 301 301", "301 301 301 301 301 301"),
    "healthz/queue/": ("none", "503 503 503 503 503 503", "503 503 503 503 503 503"),
    # Prometheus' metrics: off without METRICS_TOKEN (as here), and no session ever opens them.
    "metrics": ("none", "404 404 404 404 404 404", "404 404 404 404 404 404"),
    # Two-step sign-in: owners and managers add an app; whoever signed in may enter a code.
    "account/two-factor/": ("none", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "account/verify/": ("none", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    # An invitation's link: anyone holding a working one sets that member's password (tests/crm/
    # test_invitations.py); a link that does not work answers 410, whoever is signed in.
    "account/invitation/<str:uidb64>/<str:token>/": (
        "link:invitation",
        "410 410 410 410 410 410",
        "410 410 410 410 410 410",
    ),
    # Single sign-on's start and callback: off without OIDC_ISSUER (as here), whoever asks
    # (tests/leadops/test_oidc.py signs in through them against a local provider).
    "oidc/authenticate/": ("none", "404 404 404 404 404 404", "404 404 404 404 404 404"),
    "oidc/callback/": ("none", "404 404 404 404 404 404", "404 404 404 404 404 404"),
    # Authenticator apps in the admin: the operator's (superuser) alone, to remove a lost one.
    "admin/otp_totp/totpdevice/<int:pk>/config/": ("totpdevice", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/otp_totp/totpdevice/<int:pk>/qrcode/": ("totpdevice", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/otp_totp/totpdevice/": ("totpdevice", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/otp_totp/totpdevice/add/": ("totpdevice", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/otp_totp/totpdevice/<path:object_id>/history/": (
        "totpdevice",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/otp_totp/totpdevice/<path:object_id>/delete/": (
        "totpdevice",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/otp_totp/totpdevice/<path:object_id>/change/": (
        "totpdevice",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/otp_totp/totpdevice/<path:object_id>/": ("totpdevice", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "app/": ("none", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "app/inbox/": ("none", "200 200 200 403 200 302", "405 405 405 403 405 302"),
    "app/inbox/live/": ("none", "200 200 200 403 200 302", "405 405 405 403 405 302"),
    "app/unread/": ("none", "200 200 200 403 200 302", "405 405 405 403 405 302"),
    "app/leads/<str:public_id>/": ("lead", "200 200 200 403 404 302", "405 405 405 403 405 302"),
    "app/leads/<str:public_id>/live/": ("lead", "200 200 200 403 404 302", "405 405 405 403 405 302"),
    "app/leads/<str:public_id>/send/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/done/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/next-action/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/reached/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/hold/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/calls/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/notes/": ("lead", "405 405 405 403 405 302", "302 302 302 403 404 302"),
    "app/leads/<str:public_id>/reassign/": ("lead", "405 405 405 403 405 302", "302 302 403 403 404 302"),
    "app/leads/<str:public_id>/book/": ("lead", "200 200 200 403 404 302", "200 200 200 403 404 302"),
    # Approvals in the workspace: the business's managers and owners decide; a setter is refused.
    "app/approvals/": ("none", "200 200 403 403 200 302", "405 405 405 403 405 302"),
    "app/approvals/<str:public_id>/": ("approvalrequest", "302 302 403 403 404 302", "405 405 405 403 405 302"),
    "app/approvals/<str:public_id>/approve/": (
        "approvalrequest",
        "405 405 405 403 405 302",
        "302 302 403 403 404 302",
    ),
    "app/approvals/<str:public_id>/edit/": ("approvalrequest", "405 405 405 403 405 302", "302 302 403 403 404 302"),
    "app/approvals/<str:public_id>/reject/": (
        "approvalrequest",
        "405 405 405 403 405 302",
        "302 302 403 403 404 302",
    ),
    # The copilot's old address: the thread, for those who may see the conversation.
    "admin/leads/<str:public_id>/copilot/": ("lead", "302 302 302 404 404 302", "302 302 302 404 404 302"),
    "admin/leads/<str:public_id>/booking/": ("lead", "200 200 200 200 404 302", "302 302 302 403 404 302"),
    "admin/my/next-actions/": ("none", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/my/tasks/<str:public_id>/complete/": ("task", "404 404 200 404 404 302", "404 404 200 404 404 302"),
    "admin/revenue/": ("none", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    # The 10DLC evidence pack holds consent evidence: leaders only, each of their own business.
    "admin/compliance/evidence/": ("none", "200 200 403 403 200 302", "405 405 405 405 405 302"),
    # SMS health: leaders read it; only the business's own leaders resume a sequence it paused.
    # The agency portfolio: the businesses whose revenue the reader may read (otto: his own).
    "admin/reports/portfolio/": ("none", "200 200 403 403 200 302", "405 405 405 405 405 302"),
    "admin/reports/sms-health/": ("none", "200 200 403 403 200 302", "405 405 405 405 405 302"),
    "admin/sequences/<str:public_id>/resume/": ("sequence", "405 405 405 405 405 302", "302 302 403 403 403 302"),
    # Google reviews: leaders read them and propose or retry replies on their own business's;
    # only an owner picks the location (without a business named, nobody may).
    "admin/reviews/": ("none", "200 200 403 403 200 302", "405 405 405 405 405 302"),
    "admin/reviews/location/": ("none", "405 405 405 405 405 302", "403 403 403 403 403 302"),
    "admin/reviews/<str:public_id>/reply/": ("review", "405 405 405 405 405 302", "302 302 403 403 403 302"),
    "admin/reviews/<str:public_id>/retry/": ("review", "405 405 405 405 405 302", "302 302 403 403 403 302"),
    # Sync with the business's own systems: leaders see the status, every team
    # member their own calendar; only an owner connects the business's system
    # (without a business named, nobody may); the callback without the
    # session's state goes back to the status page, connecting nothing.
    "admin/sync/": ("none", "200 200 200 200 200 302", "405 405 405 405 405 302"),
    "admin/sync/<slug:provider>/connect/": ("adapter:jobber", "405 405 405 405 405 302", "403 403 403 403 403 302"),
    "admin/sync/<slug:provider>/callback/": ("adapter:jobber", "302 302 302 302 302 302", "405 405 405 405 405 302"),
    "admin/sync/<slug:provider>/key/": (
        "adapter:housecall_pro",
        "405 405 405 405 405 302",
        "403 403 403 403 403 302",
    ),
    "admin/reports/brief/": ("brief", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/reports/exceptions/": ("exceptions", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/reports/funnel/": ("funnel", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/reports/leaks/": ("leaks", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/leads/<str:public_id>/trace/": ("lead", "200 200 200 404 404 302", "200 200 200 404 404 302"),
    "admin/": ("none", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/login/": ("none", "302 302 302 302 302 200", "200 200 200 200 200 200"),
    "admin/logout/": ("none", "405 405 405 405 405 302", "200 200 200 200 200 302"),
    "admin/password_change/": ("none", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/password_change/done/": ("done", "200 200 200 200 200 302", "405 405 405 405 405 302"),
    "admin/autocomplete/": ("none", "403 403 403 403 403 302", "405 405 405 405 405 302"),
    "admin/jsi18n/": ("none", "200 200 200 200 200 302", "405 405 405 405 405 302"),
    "admin/r/<path:content_type_id>/<path:object_id>/": ("lead", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "admin/auth/group/": ("none", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/group/add/": ("none", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/group/<path:object_id>/history/": ("none", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/auth/group/<path:object_id>/delete/": ("none", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/auth/group/<path:object_id>/change/": ("none", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/auth/group/<path:object_id>/": ("none", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "admin/auth/user/<id>/password/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/user/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/user/add/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/user/<path:object_id>/history/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/user/<path:object_id>/delete/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/user/<path:object_id>/change/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/auth/user/<path:object_id>/": ("user", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/authtoken/tokenproxy/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/authtoken/tokenproxy/add/": ("user", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/authtoken/tokenproxy/<path:object_id>/history/": (
        "user",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/authtoken/tokenproxy/<path:object_id>/delete/": (
        "user",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/authtoken/tokenproxy/<path:object_id>/change/": (
        "user",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/authtoken/tokenproxy/<path:object_id>/": ("user", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/django_q/schedule/": ("schedule", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/schedule/add/": ("schedule", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/schedule/<path:object_id>/history/": (
        "schedule",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/schedule/<path:object_id>/delete/": (
        "schedule",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/schedule/<path:object_id>/change/": (
        "schedule",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/schedule/<path:object_id>/": ("schedule", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "admin/django_q/success/": ("success", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/success/add/": ("success", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/success/<path:object_id>/history/": (
        "success",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/success/<path:object_id>/delete/": (
        "success",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/success/<path:object_id>/change/": (
        "success",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/success/<path:object_id>/": ("success", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "admin/django_q/failure/": ("failure", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/failure/add/": ("failure", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/failure/<path:object_id>/history/": (
        "failure",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/failure/<path:object_id>/delete/": (
        "failure",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/failure/<path:object_id>/change/": (
        "failure",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/django_q/failure/<path:object_id>/": ("failure", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "admin/django_q/ormq/": ("ormq", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/ormq/add/": ("ormq", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/django_q/ormq/<path:object_id>/history/": ("ormq", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/django_q/ormq/<path:object_id>/delete/": ("ormq", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/django_q/ormq/<path:object_id>/change/": ("ormq", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/django_q/ormq/<path:object_id>/": ("ormq", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "admin/crm/lead/<path:object_id>/stage/": ("lead", "302 302 302 302 404 302", "302 302 302 403 404 302"),
    "admin/crm/lead/<path:object_id>/assign/": ("lead", "302 302 302 302 404 302", "302 302 403 403 404 302"),
    "admin/crm/lead/<path:object_id>/next-action/": ("lead", "302 302 302 302 404 302", "302 302 302 403 404 302"),
    "admin/crm/lead/": ("lead", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/crm/lead/add/": ("lead", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/lead/<path:object_id>/history/": ("lead", "200 200 200 200 302 302", "200 200 200 200 302 302"),
    "admin/crm/lead/<path:object_id>/delete/": ("lead", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/lead/<path:object_id>/change/": ("lead", "200 200 200 200 302 302", "302 302 302 403 302 302"),
    "admin/crm/lead/<path:object_id>/": ("lead", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/contact/": ("contact", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/crm/contact/add/": ("contact", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/contact/<path:object_id>/history/": ("contact", "200 200 200 200 302 302", "200 200 200 200 302 302"),
    "admin/crm/contact/<path:object_id>/delete/": ("contact", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/contact/<path:object_id>/change/": ("contact", "200 200 200 200 302 302", "200 200 403 403 302 302"),
    "admin/crm/contact/<path:object_id>/": ("contact", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/receipt/": ("receipt", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/receipt/add/": ("receipt", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/receipt/<path:object_id>/history/": ("receipt", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/receipt/<path:object_id>/delete/": ("receipt", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/receipt/<path:object_id>/change/": ("receipt", "200 200 200 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/receipt/<path:object_id>/": ("receipt", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/inboundevent/": ("inboundevent", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/inboundevent/add/": ("inboundevent", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/inboundevent/<path:object_id>/history/": (
        "inboundevent",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/inboundevent/<path:object_id>/delete/": (
        "inboundevent",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/inboundevent/<path:object_id>/change/": (
        "inboundevent",
        "200 200 403 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/inboundevent/<path:object_id>/": ("inboundevent", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/business/": ("business", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/business/add/": ("business", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/business/<path:object_id>/history/": ("business", "200 200 302 302 302 302", "200 200 302 302 302 302"),
    "admin/crm/business/<path:object_id>/delete/": ("business", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/business/<path:object_id>/change/": ("business", "200 200 403 403 302 302", "200 403 403 403 403 302"),
    "admin/crm/business/<path:object_id>/": ("business", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/source/": ("source", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/source/add/": ("source", "200 403 403 403 403 302", "200 403 403 403 403 302"),
    "admin/crm/source/<path:object_id>/history/": ("source", "200 200 302 302 302 302", "200 200 302 302 302 302"),
    "admin/crm/source/<path:object_id>/delete/": ("source", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/source/<path:object_id>/change/": ("source", "200 200 403 403 302 302", "200 403 403 403 403 302"),
    "admin/crm/source/<path:object_id>/": ("source", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    # Webhook subscriptions as sources: leaders read, owners change; the delivery log is read-only.
    "admin/crm/webhooksubscription/": (
        "webhooksubscription",
        "200 200 403 403 200 302",
        "200 200 403 403 200 302",
    ),
    "admin/crm/webhooksubscription/add/": (
        "webhooksubscription",
        "200 403 403 403 403 302",
        "200 403 403 403 403 302",
    ),
    "admin/crm/webhooksubscription/<path:object_id>/history/": (
        "webhooksubscription",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/webhooksubscription/<path:object_id>/delete/": (
        "webhooksubscription",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/webhooksubscription/<path:object_id>/change/": (
        "webhooksubscription",
        "200 200 403 403 302 302",
        "200 403 403 403 403 302",
    ),
    "admin/crm/webhooksubscription/<path:object_id>/": (
        "webhooksubscription",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/crm/webhookdelivery/": ("webhookdelivery", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/webhookdelivery/add/": ("webhookdelivery", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/webhookdelivery/<path:object_id>/history/": (
        "webhookdelivery",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/webhookdelivery/<path:object_id>/delete/": (
        "webhookdelivery",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/webhookdelivery/<path:object_id>/change/": (
        "webhookdelivery",
        "200 200 403 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/webhookdelivery/<path:object_id>/": (
        "webhookdelivery",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/crm/conversionupload/": ("conversionupload", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/conversionupload/add/": ("conversionupload", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/conversionupload/<path:object_id>/history/": (
        "conversionupload",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/conversionupload/<path:object_id>/delete/": (
        "conversionupload",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/conversionupload/<path:object_id>/change/": (
        "conversionupload",
        "200 200 403 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/conversionupload/<path:object_id>/": (
        "conversionupload",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/crm/conversionaccount/": ("conversionaccount", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/conversionaccount/add/": ("conversionaccount", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/conversionaccount/<path:object_id>/history/": (
        "conversionaccount",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/conversionaccount/<path:object_id>/delete/": (
        "conversionaccount",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/conversionaccount/<path:object_id>/change/": (
        "conversionaccount",
        "200 200 403 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/conversionaccount/<path:object_id>/": (
        "conversionaccount",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/crm/teammember/": ("teammember", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/teammember/add/": ("teammember", "200 403 403 403 403 302", "200 403 403 403 403 302"),
    "admin/crm/teammember/<path:object_id>/history/": (
        "teammember",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/teammember/<path:object_id>/delete/": (
        "teammember",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/teammember/<path:object_id>/change/": (
        "teammember",
        "200 200 403 403 302 302",
        "200 403 403 403 403 302",
    ),
    "admin/crm/teammember/<path:object_id>/": ("teammember", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/serviceline/": ("serviceline", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/serviceline/add/": ("serviceline", "200 403 403 403 403 302", "200 403 403 403 403 302"),
    "admin/crm/serviceline/<path:object_id>/history/": (
        "serviceline",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/serviceline/<path:object_id>/delete/": (
        "serviceline",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/serviceline/<path:object_id>/change/": (
        "serviceline",
        "200 200 403 403 302 302",
        "200 403 403 403 403 302",
    ),
    "admin/crm/serviceline/<path:object_id>/": ("serviceline", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/servicearea/": ("servicearea", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/servicearea/add/": ("servicearea", "200 403 403 403 403 302", "200 403 403 403 403 302"),
    "admin/crm/servicearea/<path:object_id>/history/": (
        "servicearea",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/servicearea/<path:object_id>/delete/": (
        "servicearea",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/servicearea/<path:object_id>/change/": (
        "servicearea",
        "200 200 403 403 302 302",
        "200 403 403 403 403 302",
    ),
    "admin/crm/servicearea/<path:object_id>/": ("servicearea", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/messagetemplate/": ("messagetemplate", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/messagetemplate/add/": ("messagetemplate", "200 403 403 403 403 302", "200 403 403 403 403 302"),
    "admin/crm/messagetemplate/<path:object_id>/history/": (
        "messagetemplate",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/messagetemplate/<path:object_id>/delete/": (
        "messagetemplate",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/messagetemplate/<path:object_id>/change/": (
        "messagetemplate",
        "200 200 403 403 302 302",
        "200 403 403 403 403 302",
    ),
    "admin/crm/messagetemplate/<path:object_id>/": (
        "messagetemplate",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/crm/sequence/": ("sequence", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/sequence/add/": ("sequence", "200 403 403 403 403 302", "200 403 403 403 403 302"),
    "admin/crm/sequence/<path:object_id>/history/": ("sequence", "200 200 302 302 302 302", "200 200 302 302 302 302"),
    "admin/crm/sequence/<path:object_id>/delete/": ("sequence", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/sequence/<path:object_id>/change/": ("sequence", "200 200 403 403 302 302", "200 403 403 403 403 302"),
    "admin/crm/sequence/<path:object_id>/": ("sequence", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/contactpoint/": ("contactpoint", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/contactpoint/add/": ("contactpoint", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/contactpoint/<path:object_id>/history/": (
        "contactpoint",
        "200 200 200 302 302 302",
        "200 200 200 302 302 302",
    ),
    "admin/crm/contactpoint/<path:object_id>/delete/": (
        "contactpoint",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/contactpoint/<path:object_id>/change/": (
        "contactpoint",
        "200 200 200 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/contactpoint/<path:object_id>/": ("contactpoint", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/consentevent/": ("consentevent", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/consentevent/add/": ("consentevent", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/consentevent/<path:object_id>/history/": (
        "consentevent",
        "200 200 200 302 302 302",
        "200 200 200 302 302 302",
    ),
    "admin/crm/consentevent/<path:object_id>/delete/": (
        "consentevent",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/consentevent/<path:object_id>/change/": (
        "consentevent",
        "200 200 200 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/consentevent/<path:object_id>/": ("consentevent", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/leadtouch/": ("leadtouch", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/leadtouch/add/": ("leadtouch", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/leadtouch/<path:object_id>/history/": (
        "leadtouch",
        "200 200 200 302 302 302",
        "200 200 200 302 302 302",
    ),
    "admin/crm/leadtouch/<path:object_id>/delete/": ("leadtouch", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/leadtouch/<path:object_id>/change/": ("leadtouch", "200 200 200 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/leadtouch/<path:object_id>/": ("leadtouch", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/message/": ("message", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/message/add/": ("message", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/message/<path:object_id>/history/": ("message", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/message/<path:object_id>/delete/": ("message", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/message/<path:object_id>/change/": ("message", "200 200 200 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/message/<path:object_id>/": ("message", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/call/": ("call", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/call/add/": ("call", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/call/<path:object_id>/history/": ("call", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/call/<path:object_id>/delete/": ("call", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/call/<path:object_id>/change/": ("call", "200 200 200 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/call/<path:object_id>/": ("call", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/task/": ("task", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/task/add/": ("task", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/task/<path:object_id>/history/": ("task", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/task/<path:object_id>/delete/": ("task", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/task/<path:object_id>/change/": ("task", "200 200 200 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/task/<path:object_id>/": ("task", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/timer/": ("timer", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/timer/add/": ("timer", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/timer/<path:object_id>/history/": ("timer", "200 200 302 302 302 302", "200 200 302 302 302 302"),
    "admin/crm/timer/<path:object_id>/delete/": ("timer", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/timer/<path:object_id>/change/": ("timer", "200 200 403 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/timer/<path:object_id>/": ("timer", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/enrollment/": ("enrollment", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/enrollment/add/": ("enrollment", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/enrollment/<path:object_id>/history/": (
        "enrollment",
        "200 200 200 302 302 302",
        "200 200 200 302 302 302",
    ),
    "admin/crm/enrollment/<path:object_id>/delete/": (
        "enrollment",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/enrollment/<path:object_id>/change/": (
        "enrollment",
        "200 200 200 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/enrollment/<path:object_id>/": ("enrollment", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/appointment/": ("appointment", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/crm/appointment/add/": ("appointment", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/appointment/<path:object_id>/history/": (
        "appointment",
        "200 200 200 200 302 302",
        "200 200 200 200 302 302",
    ),
    "admin/crm/appointment/<path:object_id>/delete/": (
        "appointment",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/appointment/<path:object_id>/change/": (
        "appointment",
        "200 200 200 200 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/appointment/<path:object_id>/": ("appointment", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/estimate/": ("estimate", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/estimate/add/": ("estimate", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/estimate/<path:object_id>/history/": ("estimate", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/estimate/<path:object_id>/delete/": ("estimate", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/estimate/<path:object_id>/change/": ("estimate", "200 200 200 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/estimate/<path:object_id>/": ("estimate", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/rejecteddelivery/": ("rejecteddelivery", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/rejecteddelivery/add/": ("rejecteddelivery", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/rejecteddelivery/<path:object_id>/history/": (
        "rejecteddelivery",
        "200 200 302 302 302 302",
        "200 200 302 302 302 302",
    ),
    "admin/crm/rejecteddelivery/<path:object_id>/delete/": (
        "rejecteddelivery",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/rejecteddelivery/<path:object_id>/change/": (
        "rejecteddelivery",
        "200 200 403 403 302 302",
        "403 403 403 403 403 302",
    ),
    "admin/crm/rejecteddelivery/<path:object_id>/": (
        "rejecteddelivery",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/approvals/approvalrequest/<path:object_id>/decide/": (
        "approvalrequest",
        "302 302 302 404 404 302",
        "302 302 403 404 404 302",
    ),
    "admin/approvals/approvalrequest/": ("approvalrequest", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/approvals/approvalrequest/add/": ("approvalrequest", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/approvals/approvalrequest/<path:object_id>/history/": (
        "approvalrequest",
        "200 200 200 302 302 302",
        "200 200 200 302 302 302",
    ),
    "admin/approvals/approvalrequest/<path:object_id>/delete/": (
        "approvalrequest",
        "403 403 403 403 403 302",
        "403 403 403 403 403 302",
    ),
    "admin/approvals/approvalrequest/<path:object_id>/change/": (
        "approvalrequest",
        "200 200 200 403 302 302",
        "302 302 403 403 302 302",
    ),
    "admin/approvals/approvalrequest/<path:object_id>/": (
        "approvalrequest",
        "302 302 302 302 302 302",
        "302 302 302 302 302 302",
    ),
    "admin/crm/payment/<path:object_id>/link/": ("payment", "302 302 302 404 404 302", "302 302 403 404 404 302"),
    "admin/crm/payment/<path:object_id>/refund/": ("payment", "302 302 302 404 404 302", "302 302 403 404 404 302"),
    "admin/crm/payment/": ("payment", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/payment/add/": ("payment", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/payment/<path:object_id>/history/": ("payment", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/payment/<path:object_id>/delete/": ("payment", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/payment/<path:object_id>/change/": ("payment", "200 200 200 403 302 302", "302 302 403 403 302 302"),
    "admin/crm/payment/<path:object_id>/": ("payment", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/invoice/": ("invoice", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/invoice/add/": ("invoice", "200 200 403 403 200 302", "200 200 403 403 200 302"),
    "admin/crm/invoice/<path:object_id>/history/": ("invoice", "200 200 200 302 302 302", "200 200 200 302 302 302"),
    "admin/crm/invoice/<path:object_id>/delete/": ("invoice", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/invoice/<path:object_id>/change/": ("invoice", "200 200 200 403 302 302", "302 302 403 403 302 302"),
    "admin/crm/invoice/<path:object_id>/": ("invoice", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/job/": ("job", "200 200 200 200 200 302", "200 200 200 200 200 302"),
    "admin/crm/job/add/": ("job", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/job/<path:object_id>/history/": ("job", "200 200 200 200 302 302", "200 200 200 200 302 302"),
    "admin/crm/job/<path:object_id>/delete/": ("job", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/job/<path:object_id>/change/": ("job", "200 200 200 200 302 302", "302 302 403 302 302 302"),
    "admin/crm/job/<path:object_id>/": ("job", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/crm/refund/": ("refund", "200 200 200 403 200 302", "200 200 200 403 200 302"),
    "admin/crm/refund/add/": ("refund", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/refund/<path:object_id>/history/": ("refund", "200 200 302 302 302 302", "200 200 302 302 302 302"),
    "admin/crm/refund/<path:object_id>/delete/": ("refund", "403 403 403 403 403 302", "403 403 403 403 403 302"),
    "admin/crm/refund/<path:object_id>/change/": ("refund", "200 200 302 403 302 302", "403 403 403 403 403 302"),
    "admin/crm/refund/<path:object_id>/": ("refund", "302 302 302 302 302 302", "302 302 302 302 302 302"),
    "admin/^(?P<app_label>...)/$": (
        "none",
        "200 200 200 200 200 302",
        "200 200 200 200 200 302",
    ),
    "admin/(?P<url>.*)$": ("none", "404 404 404 404 404 302", "404 404 404 404 404 302"),
    "hooks/forms/<slug:source_key>/": ("source:website", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    "f/<slug:source_key>/": ("source:hosted_form", "200 200 200 200 200 200", "400 400 400 400 400 400"),
    # A review request's short link: anyone with the text may follow it; nothing else is served there.
    "r/<str:token>/": ("link:review_request", "302 302 302 302 302 302", "405 405 405 405 405 405"),
    "hooks/google-ads/<slug:source_key>/": ("source:google_ads", "405 405 405 405 405 405", "400 400 400 400 400 400"),
    "hooks/meta/": ("none", "403 403 403 403 403 403", "401 401 401 401 401 401"),
    "hooks/typeform/<slug:source_key>/": ("source:typeform", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    "hooks/twilio/voice/": ("none", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/twilio/voice/status/": ("none", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/twilio/sms/": ("none", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/twilio/sms/status/": ("none", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/stripe/": ("none", "405 405 405 405 405 405", "503 503 503 503 503 503"),
    "hooks/calendly/<slug:source_key>/": ("source:calendly", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    "hooks/twilio/follow-up/<str:message_id>/": ("message", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/twilio/follow-up/<str:message_id>/gather/": (
        "message",
        "405 405 405 405 405 405",
        "403 403 403 403 403 403",
    ),
    "hooks/twilio/follow-up/<str:message_id>/dial/": ("message", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/twilio/voice/recording/": ("none", "405 405 405 405 405 405", "403 403 403 403 403 403"),
    "hooks/jobber/": ("none", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    # Signed with each company's own secret: a body naming no connected company is refused the same.
    "hooks/housecall_pro/": ("none", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    # The key stands in for the path's secret too: a wrong secret is answered as an unknown key.
    "hooks/angi/<slug:source_key>/<str:path_secret>/": (
        "source:angi",
        "405 405 405 405 405 405",
        "404 404 404 404 404 404",
    ),
    # A calendar notification without its channel's token; a Graph notification that is none.
    "hooks/google-calendar/": ("none", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    "hooks/microsoft-calendar/": ("none", "405 405 405 405 405 405", "400 400 400 400 400 400"),
    "hooks/callrail/<slug:source_key>/": ("source:callrail", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    "hooks/thumbtack/<slug:source_key>/": ("source:thumbtack", "405 405 405 405 405 405", "401 401 401 401 401 401"),
    # Yelp's verification GET without its challenge; a notification naming no business of ours.
    "hooks/yelp/": ("none", "400 400 400 400 400 400", "403 403 403 403 403 403"),
    "api/v1/leads/<str:id>/trace/": ("lead", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/appointments/<str:id>/held/": ("appointment", "405 405 405 405 405 401", "409 409 409 403 404 401"),
    "api/v1/^estimates/$": ("estimate", "200 200 200 200 200 401", "400 400 400 400 400 401"),
    "api/v1/^estimates/(?P<id>[^/.]+)/$": ("estimate", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^estimates/(?P<id>[^/.]+)/accept/$": ("estimate", "405 405 405 405 405 401", "200 200 403 404 404 401"),
    "api/v1/^estimates/(?P<id>[^/.]+)/decline/$": ("estimate", "405 405 405 405 405 401", "409 409 403 404 404 401"),
    "api/v1/^estimates/(?P<id>[^/.]+)/send/$": ("estimate", "405 405 405 405 405 401", "409 409 403 404 404 401"),
    "api/v1/reports/revenue/": ("none", "200 200 403 403 200 401", "405 405 405 405 405 401"),
    "api/v1/^leads/$": ("lead", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^leads\\.(?P<format>[a-z0-9]+)/?$": ("lead", "200 200 200 200 200 401", "-"),
    "api/v1/^leads/(?P<id>[^/.]+)/$": ("lead", "200 200 200 200 404 401", "405 405 405 405 405 401"),
    "api/v1/^leads/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("lead", "200 200 200 200 404 401", "-"),
    "api/v1/^leads/(?P<id>[^/.]+)/receipts/$": ("lead", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^leads/(?P<id>[^/.]+)/receipts\\.(?P<format>[a-z0-9]+)/?$": ("lead", "200 200 200 404 404 401", "-"),
    "api/v1/^contacts/$": ("contact", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^contacts\\.(?P<format>[a-z0-9]+)/?$": ("contact", "200 200 200 200 200 401", "-"),
    "api/v1/^contacts/(?P<id>[^/.]+)/$": ("contact", "200 200 200 200 404 401", "405 405 405 405 405 401"),
    "api/v1/^contacts/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("contact", "200 200 200 200 404 401", "-"),
    "api/v1/^messages/$": ("message", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^messages\\.(?P<format>[a-z0-9]+)/?$": ("message", "200 200 200 200 200 401", "-"),
    "api/v1/^messages/(?P<id>[^/.]+)/$": ("message", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^messages/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("message", "200 200 200 404 404 401", "-"),
    "api/v1/^inbound-events/$": ("inboundevent", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^inbound-events\\.(?P<format>[a-z0-9]+)/?$": ("inboundevent", "200 200 200 200 200 401", "-"),
    "api/v1/^inbound-events/(?P<id>[^/.]+)/$": ("inboundevent", "200 200 404 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^inbound-events/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": (
        "inboundevent",
        "200 200 404 404 404 401",
        "-",
    ),
    "api/v1/^tasks/$": ("task", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^tasks\\.(?P<format>[a-z0-9]+)/?$": ("task", "200 200 200 200 200 401", "-"),
    "api/v1/^tasks/(?P<id>[^/.]+)/$": ("task", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^tasks/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("task", "200 200 200 404 404 401", "-"),
    "api/v1/^enrollments/$": ("enrollment", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^enrollments\\.(?P<format>[a-z0-9]+)/?$": ("enrollment", "200 200 200 200 200 401", "-"),
    "api/v1/^enrollments/(?P<id>[^/.]+)/$": ("enrollment", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^enrollments/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("enrollment", "200 200 200 404 404 401", "-"),
    "api/v1/^appointments/$": ("appointment", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^appointments\\.(?P<format>[a-z0-9]+)/?$": ("appointment", "200 200 200 200 200 401", "-"),
    "api/v1/^appointments/(?P<id>[^/.]+)/$": ("appointment", "200 200 200 200 404 401", "405 405 405 405 405 401"),
    "api/v1/^appointments/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("appointment", "200 200 200 200 404 401", "-"),
    "api/v1/^estimates\\.(?P<format>[a-z0-9]+)/?$": ("estimate", "200 200 200 200 200 401", "-"),
    "api/v1/^estimates/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("estimate", "200 200 200 404 404 401", "-"),
    "api/v1/^jobs/$": ("job", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^jobs\\.(?P<format>[a-z0-9]+)/?$": ("job", "200 200 200 200 200 401", "-"),
    "api/v1/^jobs/(?P<id>[^/.]+)/$": ("job", "200 200 200 200 404 401", "405 405 405 405 405 401"),
    "api/v1/^jobs/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("job", "200 200 200 200 404 401", "-"),
    "api/v1/^invoices/$": ("invoice", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^invoices\\.(?P<format>[a-z0-9]+)/?$": ("invoice", "200 200 200 200 200 401", "-"),
    "api/v1/^invoices/(?P<id>[^/.]+)/$": ("invoice", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^invoices/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("invoice", "200 200 200 404 404 401", "-"),
    "api/v1/^payments/$": ("payment", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^payments\\.(?P<format>[a-z0-9]+)/?$": ("payment", "200 200 200 200 200 401", "-"),
    "api/v1/^payments/(?P<id>[^/.]+)/$": ("payment", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^payments/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("payment", "200 200 200 404 404 401", "-"),
    "api/v1/^refunds/$": ("refund", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^refunds\\.(?P<format>[a-z0-9]+)/?$": ("refund", "200 200 200 200 200 401", "-"),
    "api/v1/^refunds/(?P<id>[^/.]+)/$": ("refund", "200 200 404 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^refunds/(?P<id>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": ("refund", "200 200 404 404 404 401", "-"),
    "api/v1/": ("none", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/<drf_format_suffix:format>": ("none", "200 200 200 200 200 401", "-"),
    "api/v1/^approvals/$": ("approvalrequest", "200 200 200 200 200 401", "405 405 405 405 405 401"),
    "api/v1/^approvals/(?P<id>[^/.]+)/$": ("approvalrequest", "200 200 200 404 404 401", "405 405 405 405 405 401"),
    "api/v1/^approvals/(?P<id>[^/.]+)/approve/$": (
        "approvalrequest",
        "405 405 405 405 405 401",
        "200 200 403 404 404 401",
    ),
    "api/v1/^approvals/(?P<id>[^/.]+)/reject/$": (
        "approvalrequest",
        "405 405 405 405 405 401",
        "200 200 403 404 404 401",
    ),
    "api/schema/": ("none", "200 200 200 200 200 200", "405 405 405 405 405 405"),
    "api/docs/": ("none", "200 200 200 200 200 200", "405 405 405 405 405 405"),
}

# The generic admin pages of a model: (sample, {page: (GET, POST)}).
ADMIN_PAGES = ("changelist", "add", "history", "delete", "change")


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            # The admin's app list names its apps in registration order: one entry whatever the order.
            yield re.sub(r"\(\?P<app_label>[^)]*\)", "(?P<app_label>...)", prefix + str(pattern.pattern))


def served_routes() -> list[str]:
    return list(dict.fromkeys(_walk(get_resolver().url_patterns)))


# ------------------------------------------------------------------ the world


@dataclass
class Samples:
    records: dict[str, Any]

    def fill(self, route: str, sample: str) -> str:
        """A concrete path for a route: each parameter from the sample record."""
        record = self.records.get(sample)
        path = re.sub(r"(^|/)\^", r"\1", route).removesuffix("$")
        path = re.sub(r"\\\.\(\?P<format>\[a-z0-9\]\+\)/\?", ".json", path)
        path = path.replace("<drf_format_suffix:format>", ".json")
        path = path.replace("(?P<app_label>...)", "crm")
        path = path.replace("(?P<url>.*)", "no-such-page/")
        path = path.replace("<path:content_type_id>", str(self.records.get("content_type", "")))
        path = re.sub(r"<path:object_id>|<int:pk>", str(getattr(record, "pk", "")), path)
        key = getattr(record, "key", None) if isinstance(record, m.Source) else None
        value = str(key or getattr(record, "public_id", None) or "")
        path = re.sub(r"\(\?P<id>\[\^/\.\]\+\)", value, path)
        path = re.sub(r"<(?:str|slug):\w+>", value, path)
        return "/" + path


def world() -> Samples:
    demo_load()
    business = m.Business.objects.get(slug="acme-hvac")
    team = {t.user.username: t for t in m.TeamMember.objects.filter(business=business).select_related("user")}
    for member in team.values():
        Token.objects.get_or_create(user=member.user)
    other = BusinessFactory.create(slug="other-plumbing", name="Other Plumbing")
    otto = member_create(other, m.Role.MANAGER, username="otto")
    get_user_model().objects.filter(pk=otto.user_id).update(is_staff=True)

    # The sample lead: Sam's, with Tom's visit and job, so each role meets it as its own or not.
    lead = m.Lead.objects.filter(business=business, jobs__technician=team["tom"]).order_by("pk").first()
    assert lead is not None, "the demo has a lead with a job for tom"
    m.Lead.objects.filter(pk=lead.pk).update(owner=team["sam"])
    appointment = (
        m.Appointment.objects.filter(lead=lead).first() or m.Appointment.objects.filter(business=business).first()
    )
    m.Appointment.objects.filter(pk=appointment.pk).update(assigned_to=team["tom"], lead=lead)

    def of_lead(model: type[Any], **extra: Any) -> Any:
        return model.objects.filter(lead=lead, **extra).first() or model.objects.filter(business=business).first()

    contact = lead.contact
    point = m.ContactPoint.objects.filter(contact=contact).first()
    now = timezone.now()
    # What the demo does not hold yet, made the way the product makes it.
    sam_task = task_create(
        lead=lead, title="Call Pat back", due_at=now + timedelta(hours=1), actor="test", owner=team["sam"]
    )
    timer_schedule(business=business, kind="sla_check", due_at=now + timedelta(hours=1), lead=lead)
    # A person decides whether an out-of-area visit may be booked (approving resumes nothing else).
    approval_request_open(
        business=business,
        kind="exception",
        summary="Out of area: book anyway?",
        proposed_by="agent:exception_path",
        lead=lead,
        payload={"flags": ["out_of_area"]},
    )
    m.InboundEvent.objects.create(
        business=business, provider="website", external_id="matrix-1", body=b"{}", received_at=now, status="failed"
    )
    m.Call.objects.create(
        business=business, lead=lead, contact=contact, direction="in", status="completed", started_at=now
    )
    m.RejectedDelivery.objects.create(business=business, provider="website", day=now.date(), count=1, last_at=now)
    assert point is not None
    consent_record(contact_point=point, channel="sms", granted=True, basis="form", actor="test")
    # A path that ended when the lead was won (the sample lead is past every trigger).
    sequence = m.Sequence.objects.filter(business=business).first()
    assert sequence is not None
    m.Enrollment.objects.create(
        business=business,
        lead=lead,
        contact=contact,
        sequence=sequence,
        status="stopped",
        stop_reason="won",
        ended_at=now,
    )
    # A Google review of the shop, as a pull keeps it.
    review, _ = review_upsert(
        business,
        {
            "name": "accounts/1/locations/2/reviews/matrix",
            "reviewer": {"displayName": "Pat Doe"},
            "starRating": "FIVE",
            "comment": "Great work",
            "createTime": now.isoformat(),
            "updateTime": now.isoformat(),
        },
        now=now,
    )
    # The demo's receiver gets every event: one run of the webhooks cluster (dry run) logs their deliveries.
    webhooks_pump()
    # And the conversions of its paid Google and Meta lead (dry run): the uploads page has rows.
    conversions_pump()
    records: dict[str, Any] = {
        "none": None,
        "lead": lead,
        "contact": contact,
        "contactpoint": point,
        "consentevent": m.ConsentEvent.objects.filter(contact_point__contact=contact).first()
        or m.ConsentEvent.objects.filter(business=business).first(),
        "leadtouch": of_lead(m.LeadTouch),
        "message": of_lead(m.Message),
        "call": of_lead(m.Call),
        "task": sam_task,
        "timer": of_lead(m.Timer),
        "enrollment": m.Enrollment.objects.filter(business=business).first(),
        "appointment": appointment,
        "estimate": of_lead(m.Estimate),
        "job": of_lead(m.Job),
        "invoice": of_lead(m.Invoice),
        "payment": of_lead(m.Payment),
        "refund": m.Refund.objects.filter(business=business).first(),
        "receipt": of_lead(m.Receipt),
        "approvalrequest": of_lead(ApprovalRequest),
        "review": review,
        "inboundevent": m.InboundEvent.objects.filter(business=business).first(),
        "rejecteddelivery": m.RejectedDelivery.objects.filter(business=business).first(),
        "business": business,
        "source": m.Source.objects.filter(business=business).first(),
        "webhooksubscription": m.WebhookSubscription.objects.filter(business=business).first(),
        "webhookdelivery": m.WebhookDelivery.objects.filter(business=business).first(),
        "conversionupload": m.ConversionUpload.objects.filter(business=business).first(),
        "conversionaccount": m.ConversionAccount.objects.filter(business=business).first(),
        "teammember": team["sam"],
        "serviceline": m.ServiceLine.objects.filter(business=business).first(),
        "servicearea": m.ServiceArea.objects.filter(business=business).first(),
        "messagetemplate": m.MessageTemplate.objects.filter(business=business).first(),
        "sequence": m.Sequence.objects.filter(business=business).first(),
        "user": team["sam"].user,
        "content_type": ContentType.objects.get_for_model(m.Lead).pk,
        "source:website": m.Source.objects.filter(business=business, provider="website").first(),
        "source:hosted_form": m.Source.objects.filter(business=business, provider="hosted_form").first(),
        "source:google_ads": m.Source.objects.filter(business=business, provider="google_ads").first(),
        "source:typeform": m.Source.objects.filter(business=business, provider="typeform").first(),
        "source:calendly": m.Source.objects.filter(business=business, provider="calendly").first(),
        "source:angi": m.Source.objects.filter(business=business, provider="angi").first(),
        "source:callrail": m.Source.objects.filter(business=business, provider="callrail").first(),
        "source:thumbtack": m.Source.objects.filter(business=business, provider="thumbtack").first(),
        # The short link names the request's token, not its id.
        "link:review_request": SimpleNamespace(
            public_id=m.ReviewRequest.objects.filter(business=business).values_list("token", flat=True).first()
        ),
        # An invitation link of no one (uid "1" in base64, no token of theirs).
        "link:invitation": SimpleNamespace(public_id="MQ"),
        # A sync adapter's routes name the provider.
        "adapter:jobber": SimpleNamespace(public_id="jobber"),
        "adapter:housecall_pro": SimpleNamespace(public_id="housecall_pro"),
        # Someone else's authenticator app (the operator's admin manages them; a role never does).
        "totpdevice": TOTPDevice.objects.create(
            user=member_create(business, m.Role.MANAGER, username="max").user, name="authenticator", confirmed=True
        ),
    }
    return Samples(records)


def client_for(role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(get_user_model().objects.get(username=USERNAMES[role]))
    return client


def observe(samples: Samples, clients: dict[str, Client], route: str, sample: str, method: str) -> list[int]:
    path = samples.fill(route, sample)
    statuses = []
    for role in ROLES:
        # One logged-in client per role serves every request: a logout (or any
        # other write) happens inside the savepoint and is rolled back with it.
        client = clients[role]
        cookies = copy.deepcopy(client.cookies)
        with transaction.atomic():
            response = client.get(path) if method == "get" else client.post(path, {})
            transaction.set_rollback(True)
        # A logout (or a login) gives the client a new session cookie; the
        # rolled-back session row is still the old one.
        client.cookies = cookies
        statuses.append(response.status_code)
    return statuses


# ------------------------------------------------------------------ the tests

API_RESOURCES = {
    "leads": "lead",
    "contacts": "contact",
    "messages": "message",
    "inbound-events": "inboundevent",
    "tasks": "task",
    "enrollments": "enrollment",
    "appointments": "appointment",
    "estimates": "estimate",
    "jobs": "job",
    "invoices": "invoice",
    "payments": "payment",
    "refunds": "refund",
    "approvals": "approvalrequest",
}
OTHER_SAMPLES = {
    "admin/leads/<str:public_id>/": "lead",
    "admin/my/tasks/": "task",
    "hooks/forms/": "source:website",
    "f/": "source:hosted_form",
    "hooks/google-ads/": "source:google_ads",
    "hooks/typeform/": "source:typeform",
    "hooks/calendly/": "source:calendly",
    "hooks/angi/": "source:angi",
    "hooks/callrail/": "source:callrail",
    "hooks/thumbtack/": "source:thumbtack",
    "hooks/twilio/follow-up/": "message",
    "api/v1/leads/<str:id>/": "lead",
    "api/v1/appointments/<str:id>/": "appointment",
    "admin/r/": "lead",
}


def guessed_sample(route: str) -> str:
    """Only for printing a first draft of a new entry."""
    for prefix, sample in OTHER_SAMPLES.items():
        if route.startswith(prefix):
            return sample
    admin_model = re.match(r"admin/\w+/(\w+)/", route)
    if admin_model:
        name = admin_model.group(1)
        return {"tokenproxy": "user", "group": "none"}.get(name, name)
    api = re.match(r"api/v1/\^?([\w-]+)", route)
    if api and api.group(1) in API_RESOURCES:
        return API_RESOURCES[api.group(1)]
    return "none"


def test_every_url_the_project_serves_has_an_entry() -> None:
    missing = [route for route in served_routes() if route not in MATRIX]
    stale = [route for route in MATRIX if route not in set(served_routes())]
    assert not missing, "URLs without an entry in the role matrix:\n" + "\n".join(missing)
    assert not stale, "entries for URLs no longer served:\n" + "\n".join(stale)


@pytest.mark.django_db
def test_every_url_answers_each_role_as_the_matrix_says() -> None:
    samples = world()
    clients = {role: client_for(role) for role in ROLES}
    printing = os.environ.get("MATRIX_PRINT") == "1"
    wrong = []
    for route in served_routes():
        sample, get_expected, post_expected = MATRIX.get(route, (guessed_sample(route), "", ""))
        observed = {}
        for method, expected in (("get", get_expected), ("post", post_expected)):
            if expected == "-" or (printing and method == "post" and "format" in route):
                observed[method] = "-"
                continue
            got = " ".join(str(s) for s in observe(samples, clients, route, sample, method))
            observed[method] = got
            if not printing and got != expected:
                wrong.append(
                    f"{method.upper()} {samples.fill(route, sample)} ({route}): expected {expected}, got {got}"
                )
        if printing:
            print(f'    "{route}": ("{sample}", "{observed["get"]}", "{observed["post"]}"),')
    assert not printing, "printed the observed matrix"
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------ fields per role

# What a technician may never read, in any answer of the API: the click ids
# and the campaign's touches, the consent ledger's evidence (address,
# browser, page), and money.
DENIED_TO_TECHNICIANS = {"touches", "gclid", "fbclid", "consent_events", "evidence", "amount"}


def keys_of(value: Any) -> set[str]:
    """Every key anywhere in a JSON answer."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_of(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_of(v)}
    return set()


def phones_of(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value.get("phones") or []) | {p for v in value.values() for p in phones_of(v)}
    if isinstance(value, list):
        return {p for v in value for p in phones_of(v)}
    return set()


@pytest.mark.django_db
def test_a_technician_reads_no_click_id_consent_evidence_money_or_other_leads_phone_in_any_api_answer() -> None:
    samples = world()
    clients = {role: client_for(role) for role in ("owner", "technician")}
    keys: dict[str, set[str]] = {"owner": set(), "technician": set()}
    phones: set[str] = set()
    read = 0
    for route, (sample, _get, _post) in MATRIX.items():
        if not route.startswith("api/v1/") or "format" in route or "schema" in route or "docs" in route:
            continue
        path = samples.fill(route, sample)
        for role, client in clients.items():
            response = client.get(path)
            if response.status_code != 200 or not response["Content-Type"].startswith("application/json"):
                continue
            keys[role] |= keys_of(response.json())
            if role == "technician":
                read += 1
                phones |= phones_of(response.json())
    assert read >= 5, "the technician read the API's answers"
    assert keys["owner"] >= DENIED_TO_TECHNICIANS, "the owner reads every one of these fields"
    assert not keys["technician"] & DENIED_TO_TECHNICIANS, keys["technician"] & DENIED_TO_TECHNICIANS
    tom = m.TeamMember.objects.get(user__username="tom")
    theirs = set(
        m.ContactPoint.objects.filter(
            Q(contact__leads__appointments__assigned_to=tom) | Q(contact__leads__jobs__technician=tom), kind="phone"
        ).values_list("value", flat=True)
    )
    assert phones and phones <= theirs, phones - theirs
