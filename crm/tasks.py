"""django-q2 task entry points of the CRM core: thin wrappers over one service."""

from __future__ import annotations

from crm.services.receipt_checkpoints import checkpoint_export_scheduled
from crm.services.receipts import receipts_seal


def seal_receipts() -> int:
    """The safety net of the after-commit seal (a process killed between
    its commit and its seal leaves receipts unsealed until this runs)."""
    return receipts_seal()


def export_receipt_checkpoint() -> int:
    return checkpoint_export_scheduled()
