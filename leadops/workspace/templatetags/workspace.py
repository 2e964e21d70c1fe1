"""The workspace's words for times, channels and the gate's verdicts.

Every time is said in the current zone (the viewer's, activated for the
request) with the zone's abbreviation, never a zone spelled into a template.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import dateformat, timezone

from approvals.selectors import approvals_pending_count
from crm.localtime import moment_words
from crm.models import Call, Message
from crm.permissions import can_anywhere
from leadops.workspace.selectors import BLOCKED_WORDS, duration_words

register = template.Library()

CHANNELS = {
    "sms": "SMS",
    "dm": "Instagram DM",
    "instagram": "Instagram DM",
    "thumbtack": "Thumbtack",
    "yelp": "Yelp",
    "email": "Email",
    "voice": "Voice",
    "call": "Call",
    "form": "Form",
    "task": "Task",
}

BLOCKED = BLOCKED_WORDS


@register.filter
def when(value: datetime | None) -> str:
    """A time in the current zone, as short as it can be said (crm.localtime.moment_words)."""
    return moment_words(value)


@register.filter
def when_full(value: datetime | None) -> str:
    """The whole time in the current zone, with the zone's name."""
    if not value:
        return ""
    local = timezone.localtime(value)
    return f"{dateformat.format(local, 'l, F j, Y, g:i A T')} ({timezone.get_current_timezone_name()})"


@register.filter
def ago(value: datetime | None) -> str:
    """How long ago (or from now) a time is: "12 min ago", "in 5 min"."""
    if not value:
        return ""
    delta = timezone.now() - value
    words = duration_words(delta)
    return f"in {words}" if delta.total_seconds() < 0 else f"{words} ago"


@register.filter
def channel_label(value: str) -> str:
    return CHANNELS.get(value, value.replace("_", " ").capitalize() if value else "")


@register.filter
def blocked_words(reason: str) -> str:
    return BLOCKED.get(reason, reason.replace("_", " "))


@register.filter
def verdict(message: Message) -> dict[str, Any]:
    """What the gate (and then the provider) made of an outbound message:
    a short label, a kind for its colour, the reason in words and the time
    it waits for, if any."""
    status = message.status
    if message.direction == "in":
        return {"label": "", "kind": "in", "reason": "", "until": None}
    if status == Message.Status.DRY_RUN:
        return {"label": "Recorded, not sent (dry run)", "kind": "ok", "reason": "", "until": None}
    if status in (Message.Status.QUEUED, Message.Status.SENDING):
        return {"label": "Sending", "kind": "ok", "reason": "", "until": None}
    if status == Message.Status.SENT:
        return {"label": "Sent", "kind": "ok", "reason": "", "until": None}
    if status == Message.Status.DELIVERED:
        return {"label": "Delivered", "kind": "ok", "reason": "", "until": None}
    if status == Message.Status.DEFERRED:
        reason = blocked_words(message.block_reason or "quiet_hours")
        return {"label": "Deferred", "kind": "wait", "reason": reason, "until": message.deferred_until}
    if status == Message.Status.PENDING_APPROVAL:
        return {
            "label": "Waiting for approval",
            "kind": "wait",
            "reason": "a manager approves it before it goes",
            "until": None,
        }
    if status == Message.Status.BLOCKED:
        return {"label": "Blocked", "kind": "bad", "reason": blocked_words(message.block_reason), "until": None}
    if status in (Message.Status.UNDELIVERED, Message.Status.FAILED):
        code = f"error {message.error_code}" if message.error_code else ""
        return {"label": "Not delivered", "kind": "bad", "reason": code, "until": None}
    if status == Message.Status.UNKNOWN:
        return {"label": "Checking with the provider", "kind": "wait", "reason": "", "until": None}
    return {"label": status.replace("_", " ").capitalize(), "kind": "", "reason": "", "until": None}


@register.filter
def preview_words(verdict_code: str) -> str:
    """The preview's verdict for a step of a path, as what would happen."""
    return {
        "dry_run": "would go out (dry run)",
        "queued": "would go out",
        "deferred": "would wait for quiet hours to end",
        "blocked": "would be blocked",
        "pending_approval": "would wait for approval",
        "task": "a task for a person",
        "skipped": "skipped",
    }.get(verdict_code, verdict_code.replace("_", " "))


@register.simple_tag
def approvals_waiting(user: Any) -> int | None:
    """How many approvals wait for `user`'s decision; None for a role that decides none (no link)."""
    if not getattr(user, "is_authenticated", False) or not can_anywhere(user, "approval.decide"):
        return None
    return approvals_pending_count(user)


@register.filter
def may_use_workspace(user: Any) -> bool:
    """Whether the user's role anywhere reads conversations (the admin's nav)."""
    return bool(getattr(user, "is_authenticated", False)) and can_anywhere(user, "message.view")


@register.filter
def may_anywhere(user: Any, permission: str) -> bool:
    """Whether the user may do `permission` in some business: the navigation
    shows only the pages the viewer's role opens."""
    return bool(getattr(user, "is_authenticated", False)) and can_anywhere(user, permission)


@register.filter
def words(value: str) -> str:
    """A stored name as words: "appointment_held" → "appointment held"."""
    return str(value or "").replace("_", " ")


@register.filter
def actor_words(actor: str) -> str:
    """Who sent a message: a person's username, or the automated role."""
    if actor.startswith("agent:"):
        return "Automated · " + actor.removeprefix("agent:").replace("_", " ")
    return actor or "someone"


MISSED = ("no-answer", "busy", "failed", "canceled")
LOGGED = {
    "connected": "talked",
    "voicemail": "left a voicemail",
    "no_answer": "no answer",
    "busy": "busy",
    "wrong_number": "wrong number",
}


@register.filter
def call_words(call: Call) -> str:
    """A call as a setter says it: "Missed call", "Voicemail", "Call out · talked"."""
    if call.direction == "in" and call.status in MISSED:
        return "Voicemail" if call.recording_url else "Missed call"
    said = "Call in" if call.direction == "in" else "Call out"
    outcome = LOGGED.get(call.outcome) or (call.outcome or call.status).replace("_", " ").replace("-", " ")
    return f"{said} · {outcome}" if outcome else said


@register.filter
def get_item(mapping: dict[str, Any] | None, key: str) -> Any:
    """`mapping[key]` in a template ("" when it is not there)."""
    return (mapping or {}).get(key, "")
