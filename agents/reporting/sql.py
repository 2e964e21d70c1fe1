"""SQL helpers for the reports.

PostgreSQL compiles a query to machine code (JIT) when the planner's cost
estimate passes `jit_above_cost`. The reports' set-based queries carry
correlated subplans (EXISTS per lead, the first touch per lead) whose estimated
cost runs into the millions although they finish in well under a second, so
JIT kicked in and its compilation took most of the time: at 100,000 leads the
leak audit spent 2.2 of its 2.8 s compiling (EXPLAIN ANALYZE, "JIT: Timing").
The report functions therefore run their queries with JIT off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction


@contextmanager
def without_jit() -> Iterator[None]:
    """A transaction whose queries PostgreSQL does not JIT-compile. `SET LOCAL`
    lasts to the end of the outermost transaction: inside a caller's own
    transaction the setting stays off until that one ends (harmless: JIT
    only ever changes how fast a query runs, never its result). No savepoint
    when nested (an error rolls back the caller's transaction, as it would
    anyway), so the pages keep their query counts."""
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
        yield
