"""Tell a person something now: email to a team member and, for the whole
business, the Slack channel. Sent after commit and outside any transaction,
so a slow mail or Slack server never holds a lead and a failure here never
undoes the change it reports."""

from __future__ import annotations

import logging

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

from crm.models import TeamMember

log = logging.getLogger(__name__)


def member_notify(member: TeamMember | None, subject: str, text: str, *, slack: bool = True) -> None:
    email = (member.email or member.user.email) if member is not None else ""
    transaction.on_commit(lambda: _deliver(email, subject, text, slack=slack))


def _deliver(email: str, subject: str, text: str, *, slack: bool) -> None:
    if email:
        try:
            send_mail(subject, text, None, [email])
        except OSError as exc:
            log.warning("notice by email failed: %s", exc)
    if slack and settings.SLACK_WEBHOOK_URL:
        try:
            requests.post(settings.SLACK_WEBHOOK_URL, json={"text": f"{subject}: {text}"}, timeout=(3.05, 5))
        except requests.RequestException as exc:
            log.warning("notice to Slack failed: %s", exc)
