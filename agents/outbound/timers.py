"""Timer handlers of the outbound path, registered at startup."""

from __future__ import annotations

from django.utils import timezone

from agents.outbound.dispatch import RETRY_TIMER, dispatch_enqueue
from agents.outbound.gate import REGATE_TIMER, message_gate
from crm.models import Message, Timer
from crm.services.timers import timer_handler_register


def _regate(timer: Timer) -> None:
    """Quiet hours are over: run the deferred message through the gate again."""
    message = Message.objects.get(pk=timer.payload["message"])
    # The run's `now` (its claim time), as the sequence steps use: a run "at"
    # the morning judges quiet hours at that morning, not at the wall clock.
    message_gate(message, now=timer.claimed_at or timezone.now())


def _retry(timer: Timer) -> None:
    """A throttled message's backoff is over: hand it to a worker again."""
    message_id = int(timer.payload["message"])
    if Message.objects.filter(pk=message_id, status=Message.Status.QUEUED).exists():
        dispatch_enqueue(message_id)


def register() -> None:
    timer_handler_register(REGATE_TIMER, _regate)
    timer_handler_register(RETRY_TIMER, _retry)
