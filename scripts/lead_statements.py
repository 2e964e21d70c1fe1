"""The SQL one new website lead costs, end to end: the webhook's acceptance,
then the intake loop's processing of the stored event (its claim, identity,
consent, and the orchestrator's new-lead step in the same unit of work: fit,
owner, next action, the acknowledgement decision, the SLA clock; receipts
all along), then every task that leads to (the owner's notice), each run the
way a worker runs it — the real task function on the real queued arguments —
until the queue is empty.
Used by the statement-count test and by bench_lead_statements.py.

Needs the demo business loaded (its website source `site`) and real commits
(on-commit enqueues, the trigger's notification), so a test using it is
transactional.
"""

from __future__ import annotations

import json
import pydoc
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

WEBSITE_PATH = "/hooks/forms/site/"
WEBSITE_SECRET = "demo-website-secret-acme"  # noqa: S105 (the demo file's, public)
FORM = {
    "first_name": "Rosa",
    "last_name": "Diaz",
    "phone": "(312) 555-0147",
    "email": "rosa.diaz@example.com",
    "postal_code": "60601",
    "message": "Furnace makes a banging noise",
    "service": "hvac",
    "consent": True,
    "consent_text": "You agree that Acme may call and text you about your request.",
    "page_url": "https://acme.example/quote",
    "utm_source": "google",
    "gclid": "Cj0KCQ-bench",
}
TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT")
# What receipt_write sends today besides its INSERT: the chain's advisory lock
# and the read of the chain's tail. The receipt redesign makes a receipt one
# INSERT; `realistic` counts as if it had landed (a no-op once it has).
RECEIPT_CHAIN_OVERHEAD = (
    re.compile(r"^SELECT pg_advisory_xact_lock\(%s, %s\)$"),
    re.compile(r'^SELECT "crm_receipt"\."seq" AS "seq", "crm_receipt"\."hash" AS "hash" FROM "crm_receipt"'),
)


@dataclass
class Statements:
    sql: list[str] = field(default_factory=list)

    @property
    def transaction_control(self) -> list[str]:
        return [s for s in self.sql if kind(s) in TRANSACTION_CONTROL]

    @property
    def statements(self) -> list[str]:
        """Every statement but savepoints and their releases."""
        return [s for s in self.sql if kind(s) not in TRANSACTION_CONTROL]

    @property
    def receipt_overhead(self) -> list[str]:
        return [s for s in self.statements if any(p.match(s) for p in RECEIPT_CHAIN_OVERHEAD)]

    @property
    def realistic(self) -> list[str]:
        """The statements, a receipt costing its one INSERT."""
        return [s for s in self.statements if not any(p.match(s) for p in RECEIPT_CHAIN_OVERHEAD)]


def kind(sql: str) -> str:
    head = sql.lstrip().split(None, 1)[0].upper()
    if head == "WITH":
        return "INSERT" if "INSERT INTO" in sql else "SELECT"
    if head == "SELECT" and "pg_advisory_xact_lock" in sql:
        return "LOCK"
    return head


def table(sql: str) -> str:
    if "pg_advisory_xact_lock" in sql:
        return "(advisory lock)"
    if kind(sql) in TRANSACTION_CONTROL:
        return ""
    match = re.search(r'(?:INSERT INTO|UPDATE|FROM)\s+"(\w+)"', sql)
    return match.group(1) if match else "(no table)"


def grouped(sql: list[str]) -> list[tuple[str, str, int]]:
    """(kind, table, count), most first."""
    counts = Counter((kind(s), table(s)) for s in sql)
    return sorted(((k, t, n) for (k, t), n in counts.items()), key=lambda row: (-row[2], row[0], row[1]))


@dataclass
class LeadCost:
    acceptance: Statements
    tasks: Statements
    task_names: list[str]
    lead: Any


def new_website_lead(form: dict[str, Any] | None = None) -> LeadCost:
    """Post one new website lead to the real view, then run the queue dry."""
    from django.db import connection
    from django.test import Client
    from django.utils import timezone
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    from agents.capture.processing import event_claim_next, event_run_claimed
    from crm.models import Lead

    acceptance, tasks = Statements(), Statements()

    def recorder(into: Statements) -> Any:
        def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            into.sql.append(sql)
            return execute(sql, params, many, context)

        return wrapper

    body = json.dumps(form or FORM).encode()
    with connection.execute_wrapper(recorder(acceptance)):
        response = Client().post(
            WEBSITE_PATH, data=body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {WEBSITE_SECRET}"
        )
    if response.status_code != 200:
        raise RuntimeError(f"the webhook answered {response.status_code}: {response.content[:300]!r}")
    names = []
    with connection.execute_wrapper(recorder(tasks)):
        # The intake loop's claim and processing of the stored event.
        event_id = event_claim_next(now=timezone.now())
        if event_id is None:
            raise RuntimeError("the accepted event is not due for the intake loop")
        names.append("intake loop")
        event_run_claimed(event_id, now=timezone.now())
    while True:
        # The queue is read and emptied outside the recorder: that is the
        # broker's work (a worker's dequeue and acknowledgement), not the lead's.
        queued = OrmQ.objects.order_by("id").first()
        if queued is None:
            break
        task = SignedPackage.loads(queued.payload)
        queued.delete()
        names.append(str(task["func"]))
        with connection.execute_wrapper(recorder(tasks)):
            pydoc.locate(task["func"])(*task["args"], **task["kwargs"])  # type: ignore[operator]
    public_id = json.loads(response.content)["id"]
    lead = Lead.objects.filter(touches__inbound_event__public_id=public_id).first()
    return LeadCost(acceptance=acceptance, tasks=tasks, task_names=names, lead=lead)
