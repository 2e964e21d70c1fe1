"""The one registry mechanism: a name registered twice is refused at startup,
a missing one is a clear LookupError, and a test's own entries go away."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from approvals.handlers import APPROVAL_HANDLERS
from crm.registry import Registry
from crm.services.timers import TIMER_KINDS, TimerKind, timer_handler_register


def test_a_name_registered_twice_is_refused_and_the_first_stays() -> None:
    hooks: Registry[str] = Registry("test hook")
    hooks.register("a", "first")

    with pytest.raises(ImproperlyConfigured, match="a test hook for 'a' is registered already"):
        hooks.register("a", "second")
    assert hooks["a"] == "first" and list(hooks) == ["a"]


def test_an_unknown_name_is_a_lookup_error_naming_what_was_looked_for() -> None:
    hooks: Registry[str] = Registry("test hook")

    assert hooks.get("nope") is None and "nope" not in hooks
    with pytest.raises(LookupError, match="no test hook registered for 'nope'"):
        hooks["nope"]


def test_registered_and_replaced_last_only_for_their_block() -> None:
    hooks: Registry[str] = Registry("test hook")
    hooks.register("kept", "k")

    with hooks.registered("extra", "e"):
        assert set(hooks) == {"kept", "extra"}
    with hooks.replaced({"only": "o"}):
        assert list(hooks) == ["only"]

    assert list(hooks) == ["kept"]


def test_the_startup_registrations_are_there_and_a_second_claim_on_a_kind_is_refused() -> None:
    # Filled by the apps' ready(): the orchestrator's steps and the approval kinds the roles resume.
    assert isinstance(TIMER_KINDS["orchestrate"], TimerKind) and TIMER_KINDS["orchestrate"].atomic
    assert "message_draft" in APPROVAL_HANDLERS

    with pytest.raises(ImproperlyConfigured):
        timer_handler_register("orchestrate", lambda timer: None)
    assert TIMER_KINDS["orchestrate"].atomic  # the orchestrator's, untouched
