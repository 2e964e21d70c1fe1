"""A person holds a lead's automation, or releases it.

The hold itself is CRM Sync's (`lead_set_hold`): while it stands the gate
refuses every send for the lead, a person's included, until someone
releases it. The paths it stops end at once rather than at their next step,
and the path it stopped starts again where it was on release: the
orchestrator's `hold.set` and `hold.released` steps, recorded here in the
same transaction as the hold.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agents.events import lead_event
from crm.models import Lead
from crm.services import lead_sync


@transaction.atomic
def automation_hold(lead: Lead, *, hold: bool, actor: str, reason: str) -> Lead:
    """Hold (or release) the lead and its automated paths, with receipts.
    Raises lead_sync.LeadSyncError when it already is as asked."""
    saved = lead_sync.lead_set_hold(lead, hold, actor=actor, reason=reason)
    # Each hold and release is its own event: the key tells them apart.
    lead_event(
        saved,
        "hold.set" if hold else "hold.released",
        key=f"{saved.public_id}:{timezone.now().isoformat()}",
        data={"reason": reason},
        actor=actor,
    )
    return saved
