"""Follow-up and rescue: the sequence engine and the roles that run
on it — No-Reply Follow-Up, the Reply Logger, Open-Estimate Follow-Up and AI
Voice Follow-Up. `register()` wires their timers, hooks and approval
handlers at startup (agents.apps)."""

from __future__ import annotations


def register() -> None:
    from agents.followup import estimates, no_reply, voice
    from agents.followup.sequences import engine as sequence_engine

    sequence_engine.register()
    no_reply.register()
    estimates.register()
    voice.register()
