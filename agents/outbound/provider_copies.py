"""Erasing a forgotten person's copies at Twilio.

Twilio keeps every text's body in its message log and every call's
recording. When a person is forgotten (crm.services.forget), the eraser
below counts what Twilio holds of them in the `contact.forgotten` receipt
and, once that transaction has committed, queues one task that asks Twilio
through its SDK to redact each message body (an update with an empty body,
Twilio's own redaction) and delete each recording. Only sids travel in the
task, never the person. In dry run (SEND_MODE other than live) nothing is
asked of Twilio and the task says so. A failure raises: the task fails
visibly in django-q and can be run again (redacting twice is harmless).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from twilio.base.exceptions import TwilioRestException

from agents.outbound.twilio_accounts import business_account, twilio_client
from agents.queue import task_enqueue

log = logging.getLogger(__name__)


@dataclass
class CopiesErased:
    messages: int = 0
    recordings: int = 0
    gone: int = 0  # Twilio no longer had it (404): nothing left to erase
    dry_run: bool = False
    errors: list[str] = field(default_factory=list)


def twilio_copies_forget(forgetting: Any) -> None:
    """The forget eraser: count Twilio's copies and queue their erasure."""
    messages, recordings = list(forgetting.twilio_messages), list(forgetting.twilio_recordings)
    if not (messages or recordings) or not forgetting.counts:
        # Nothing at Twilio, or the person was forgotten already (the erasers
        # before this one found nothing left): asked once, not at every run.
        return
    forgetting.count("twilio_message_bodies", len(messages))
    forgetting.count("twilio_recordings", len(recordings))
    task_enqueue(
        "agents.tasks.twilio_copies_erase",
        forgetting.contact.business_id,
        messages,
        recordings,
        group="forget",
    )


def twilio_copies_erase(business_id: int, messages: list[str], recordings: list[str]) -> CopiesErased:
    """Redact each message body and delete each recording at Twilio."""
    if settings.SEND_MODE != "live":
        return CopiesErased(dry_run=True)
    client = twilio_client(business_account(business_id))
    done = CopiesErased()
    done.messages = _each(done, "message", messages, lambda sid: client.messages(sid).update(body=""))
    done.recordings = _each(done, "recording", recordings, lambda sid: client.recordings(sid).delete())
    if done.errors:
        raise RuntimeError("Twilio kept some copies: " + "; ".join(done.errors))
    return done


def _each(done: CopiesErased, what: str, sids: list[str], erase: Callable[[str], Any]) -> int:
    """Erase each sid; how many went. Twilio's 404 (already gone) is
    counted in `done.gone`, any other refusal noted in `done.errors`."""
    erased = 0
    for sid in sids:
        try:
            erase(sid)
            erased += 1
        except TwilioRestException as exc:
            if exc.status == 404:
                done.gone += 1
            else:
                done.errors.append(f"{what} {sid}: HTTP {exc.status}")
    return erased


def register() -> None:
    from crm.services.forget import forget_eraser_register

    forget_eraser_register("twilio copies", twilio_copies_forget)
