"""Tell a person something now: email to a team member and, for the whole
business, its Slack channel. Handed to a task of its own after commit
(`notice_deliver`), so a slow mail or Slack server never holds a lead, a
request or the timer loop (most notices are raised by timer handlers: SLA
breaches, orchestrator steps), and a failure here never undoes the change it
reports.

Slack reads `<...>` as markup (`<!channel>`, `<https://x|Pay now>`) and
`&` as the start of an entity; text that came from anybody (a name typed on a
form) is therefore escaped before it is posted.
"""

from __future__ import annotations

import json
import logging

import requests
from django.conf import settings
from django.core.mail import send_mail

from agents.guarded_post import webhook_post
from agents.queue import task_enqueue
from crm.models import Business, TeamMember

log = logging.getLogger(__name__)
SLACK_TIMEOUT = (3.05, 5)
# Above the SMTP and Slack timeouts together, below Q_CLUSTER's retry.
NOTICE_TIMEOUT = 30


def slack_escape(text: str) -> str:
    """Plain text as Slack shows it literally (its three control characters)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackFailed(RuntimeError):
    """A Slack post did not arrive; the message says why in our words (a
    status, a refusal), never with the far side's answer in it."""


def slack_post(url: str, text: str) -> None:
    """Post `text` to a Slack incoming webhook, or raise SlackFailed.

    A business's own URL is a tenant's input: it goes through the outbound
    webhooks' server-side request forgery guard at every post (public
    addresses only, the connection made to the address checked, no
    redirects: agents.guarded_post). The operator's SLACK_WEBHOOK_URL
    is their own setting, posted as it is."""
    if url == str(settings.SLACK_WEBHOOK_URL or ""):
        try:
            response = requests.post(url, json={"text": text}, timeout=SLACK_TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            raise SlackFailed(f"Slack not reached ({type(exc).__name__})") from None
        if not 200 <= response.status_code < 300:
            raise SlackFailed(f"Slack answered {response.status_code}")
        return
    answer = webhook_post(url, json.dumps({"text": text}).encode(), {"Content-Type": "application/json"})
    if answer.refused:
        raise SlackFailed(f"the business's Slack webhook is refused: {answer.error}")
    if not answer.delivered:
        raise SlackFailed(
            f"Slack answered {answer.status_code}" if answer.status_code else f"Slack not reached ({answer.error})"
        )


def slack_webhook_for(business: Business | None) -> str:
    """The business's own Slack webhook, else the operator's SLACK_WEBHOOK_URL ("" for none)."""
    own = business.slack_webhook_url if business is not None else ""
    return str(own or settings.SLACK_WEBHOOK_URL or "")


def member_notify(member: TeamMember | None, subject: str, text: str, *, slack: bool = True) -> None:
    email = (member.email or member.user.email) if member is not None else ""
    url = slack_webhook_for(member.business if member is not None else None) if slack else ""
    notice_enqueue(email, subject, text, slack_url=url)


def notice_enqueue(email: str, subject: str, text: str, *, slack_url: str = "") -> None:
    """Queue one notice for `notice_deliver`, sent once the caller's
    transaction commits (agents.queue): a rolled-back change notifies nobody."""
    if not (email or slack_url):
        return
    task_enqueue("agents.tasks.notice_deliver", email, subject, text, slack_url, group="notify", timeout=NOTICE_TIMEOUT)


def notice_deliver(email: str, subject: str, text: str, *, slack_url: str = "") -> None:
    """The task: send one notice by email and to Slack (each with its own timeout)."""
    if email:
        try:
            send_mail(subject, text, None, [email])
        except OSError as exc:
            log.warning("notice by email failed: %s", exc)
    if slack_url:
        try:
            slack_post(slack_url, slack_escape(f"{subject}: {text}"))
        except SlackFailed as exc:
            log.warning("notice to Slack failed: %s", exc)
