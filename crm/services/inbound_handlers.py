"""What processes a stored inbound event, by provider and kind.

The role that acts on a delivery registers its handler here at startup
(follow-up handles Twilio's voice events, outbound its status callbacks,
reporting its recordings), and capture's processing looks the handler up:
the roles import this module, never capture, and capture imports none of
them (as `crm.services.timers` does for per-lead clocks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crm.models import InboundEvent, Lead, Message
from crm.registry import Registry
from crm.services.units import unit_of_work

# A handler returns PROCESSED or IGNORED (an echo, a status we do not track…).
# One that must read from the network first registers a `prepare` step: it
# runs outside the transaction, and its result is handed to the handler, so
# no transaction stays open while a provider is slow.
Handler = Callable[..., str]
Prepare = Callable[[InboundEvent], Any]
EVENT_HANDLERS: Registry[tuple[Handler, Prepare | None]] = Registry("inbound event handler")


class MalformedPayload(ValueError):
    """A body that passed authentication but cannot be parsed: the same
    bytes fail the same way, so the event is failed once, not retried."""


class RetryLater(Exception):
    """Raised by a handler when the event refers to a record that is not
    saved yet but is expected to be: the event waits and is tried again."""


# How a handler's unit of work runs: `runner(work)` calls `work()` inside
# one unit and returns its outcome. The orchestrator registers the one that
# also runs the first step of every lead the handler opened, at the unit's
# end (agents/orchestrator.py: `inbound_unit_run`); without it, a plain unit.
UnitRunner = Callable[[Callable[[], str]], str]
UNIT_RUNNERS: Registry[UnitRunner] = Registry("inbound unit runner")


def unit_runner_register(runner: UnitRunner) -> None:
    UNIT_RUNNERS.register("inbound", runner)


def unit_run(work: Callable[[], str]) -> str:
    """`work()` in the registered runner's unit of work (a plain one if none)."""
    runner = UNIT_RUNNERS.get("inbound")
    if runner is not None:
        return runner(work)
    with unit_of_work():
        return work()


def handler_register(provider: str, kind: str, handler: Handler, *, prepare: Prepare | None = None) -> None:
    """`handler(event)`, or `handler(event, prepared)` when `prepare` is given."""
    EVENT_HANDLERS.register(f"{provider}:{kind}", (handler, prepare))


# What follows a text or DM a person sent, once capture has recorded it on
# its lead: the consent check, the end of automated follow-up for a reply,
# and the reading (a model's, or the after-hours receptionist's). One
# subscriber, follow-up's (agents/followup/inbound_messages.py), runs them in
# that order in capture's transaction; capture only announces the message.
MessageArrived = Callable[..., None]
MESSAGE_ARRIVED: Registry[MessageArrived] = Registry("inbound message subscriber")


def message_subscriber_register(subscriber: MessageArrived) -> None:
    MESSAGE_ARRIVED.register("message", subscriber)


def message_arrived(message: Message, lead: Lead, *, created_lead: bool, opt_out_type: str = "") -> None:
    """Hand a recorded inbound text or DM on (in the caller's transaction)."""
    MESSAGE_ARRIVED["message"](message, lead, created_lead=created_lead, opt_out_type=opt_out_type)
