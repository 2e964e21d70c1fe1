"""One unit of work, entered in one place per task.

A task's handler (an inbound event's, a timer's) runs in one transaction
whose receipts and outbox events are inserted in one statement at its end
and whose playbook reads are shared (crm/context.py holds that state). The
request path enters nothing: a page's writes are few, and each is its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction

from crm.context import UnitOfWork, unit_entered
from crm.selectors import reads_shared
from crm.services.receipts import receipts_batched


@contextmanager
def unit_of_work() -> Iterator[UnitOfWork]:
    """Enter the block's transaction and its unit of work: receipts and
    events batched, reads shared. Inner blocks of the same kinds join it."""
    with transaction.atomic(), unit_entered() as work, receipts_batched(), reads_shared():
        yield work
