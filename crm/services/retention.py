"""Retention: raw inbound bodies are kept only as long as they are useful.

A provider's delivery is stored verbatim (raw first) so that a failure can be
replayed. Once an event is processed or ignored, its body and headers (which
hold the person's words, numbers and addresses) are cleared after the
business's `raw_retention_days`; the row itself stays (provider, external id
for deduplication, status, times). Failed events keep their body until a
person resolves them (a replay that processes them starts their clock).
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from crm.models import Business

PRUNE_BATCH = 2000
# Events whose business was never known follow the default.
_DEFAULT_DAYS = Business._meta.get_field("raw_retention_days").get_default()

# One statement: pick a bounded batch of expired rows (skipping rows a worker
# holds, so a run never waits on processing), clear them, count them. The
# batch is a MATERIALIZED CTE, picked once: as `WHERE id IN (SELECT … LIMIT …
# FOR UPDATE SKIP LOCKED)` the planner may rescan the subquery for each row
# (a nested-loop semi-join), and a rescan skips the rows this very statement
# has just cleared and takes the next ones, past the LIMIT.
_PRUNE_SQL = """
WITH batch AS MATERIALIZED (
    SELECT e.id FROM crm_inboundevent e LEFT JOIN crm_business b ON b.id = e.business_id
    WHERE e.status IN ('processed', 'ignored')
      AND (octet_length(e.body) > 0 OR e.headers <> '{}'::jsonb)
      AND e.received_at < %s - make_interval(days => COALESCE(b.raw_retention_days, %s))
    ORDER BY e.id
    LIMIT %s
    FOR UPDATE OF e SKIP LOCKED
)
UPDATE crm_inboundevent SET body = '\\x'::bytea, headers = '{}'::jsonb
FROM batch WHERE crm_inboundevent.id = batch.id
"""


def raw_bodies_prune(*, now: datetime | None = None, batch: int = PRUNE_BATCH) -> int:
    """Clear the raw body and headers of up to `batch` processed or ignored
    events older than their business's retention; returns how many.

    Owns its transaction; a backlog larger than one batch is finished by the
    next runs."""
    now = now or timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_PRUNE_SQL, [now, _DEFAULT_DAYS, batch])
        return int(cursor.rowcount)
