"""A sequence paused, and resumed: the SMS health check's brake
(agents/reporting/sms_health.py). A paused sequence's text steps wait
(step_run holds them and looks again later); its paths are not ended, so a
resume picks each up where it stood. A person resumes it (the Sequence admin's
action); both changes have a receipt."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from crm.models import Sequence
from crm.services.receipts import receipt_write


@transaction.atomic
def sequence_pause(sequence: Sequence, *, reason: str, actor: str, now: datetime) -> bool:
    """Pause it (False: it was paused already, and keeps its first reason)."""
    paused = Sequence.objects.filter(pk=sequence.pk, paused_at__isnull=True).update(
        paused_at=now, paused_reason=reason[:300]
    )
    if not paused:
        return False
    sequence.paused_at, sequence.paused_reason = now, reason[:300]
    receipt_write(
        business=sequence.business,
        subject=sequence.public_id,
        actor=actor,
        action="sequence.paused",
        reason=reason[:300],
        before={"paused": False},
        after={"paused": True, "sequence": sequence.key},
    )
    return True


@transaction.atomic
def sequence_resume(sequence: Sequence, *, actor: str, reason: str = "") -> bool:
    """Resume it (False: it was not paused)."""
    was = Sequence.objects.select_for_update().filter(pk=sequence.pk, paused_at__isnull=False).first()
    if was is None:
        return False
    Sequence.objects.filter(pk=sequence.pk).update(paused_at=None, paused_reason="")
    sequence.paused_at, sequence.paused_reason = None, ""
    receipt_write(
        business=sequence.business,
        subject=sequence.public_id,
        actor=actor,
        action="sequence.resumed",
        reason=reason or f"resumed after: {was.paused_reason}"[:300],
        before={"paused": True, "reason": was.paused_reason},
        after={"paused": False, "sequence": sequence.key},
    )
    return True
