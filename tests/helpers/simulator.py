"""Shared helpers for tests that run `simulate` against a live server: the demo
business it posts to, and doing the cluster's work on what arrived."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from agents.capture.processing import event_process
from crm.models import InboundEvent

DEMO = Path(__file__).resolve().parents[2] / "demo" / "acme-hvac.yaml"
# The demo business has no hosted form; a test adds one the way an operator would.
HOSTED_FORM_FILE = """\
business: {slug: acme-hvac, name: "Acme Heating & Air", timezone: America/Chicago, region: US}
sources:
  - {key: acme-quote, provider: hosted_form}
"""


def process_received() -> Counter[str]:
    """What the cluster does: every received event, oldest first."""
    ids = InboundEvent.objects.filter(status="received").order_by("received_at", "pk").values_list("pk", flat=True)
    return Counter(event_process(pk) for pk in list(ids))
