"""Named transaction locks, and the one order every lock is taken in.

Deadlocks come from two transactions taking the same two locks in opposite
orders. LeadOps takes its locks in this order, outermost first, and a path
that needs a lock earlier in the list than one it holds must take it first
(or not at all). Within one level, several rows of one kind are locked in
primary-key (or, for names, sorted) order.

1. Named locks (`xact_lock`): a business file load (its own namespace, by
   slug), a call's first record (`twilio-call:<CallSid>`), the identity of a
   contact point (`identity:<business>:<point>`, sorted) and then of the
   contacts it leads to (`identity:<business>:contact:<pk>`, `contacts_lock`,
   every contact one capture matched in one sorted call; a named lock, not
   the contact's row, because of level 3). A merge of contacts takes the
   contact locks of all the contacts it joins (sorted) before anything else,
   so a capture of either person and the merge run one after the other.
2. Lead rows, FOR NO KEY UPDATE, by pk: writers of one lead queue behind each
   other, while rows that only reference the lead (receipts, events, tasks,
   timers) insert without waiting on it.
3. Contact rows (a follow-up step's stop rules lock the lead, then its
   contact; forgetting a person locks their leads, then the contact).
4. The records of a lead, in this order: an ApprovalRequest, then the record
   its decision changes (Estimate, Message, Appointment, Enrollment, Call,
   MessageTemplate and its version); Payment before Invoice. A decision whose
   handler needs locks of levels 1-3 (a contact merge: both people's contact
   locks, their leads, their contact rows) takes them in its kind's `lock`
   hook before the request row (approvals.handlers).
   The lead's Conversation row (the inbox's summary) comes after all of
   these: the database takes it when a message is written or a lead is
   won, lost or disqualified (crm.db_triggers), so a path that writes a
   lead's message and locks the lead takes the lead's lock first.
5. Tasks (the next action), ConsentState, setters' TeamMember rows (round
   robin, by pk).
6. Timer rows: claimed FOR UPDATE SKIP LOCKED, so a claim never waits.

The receipt chain takes no lock in these transactions: a receipt is one
INSERT, and the sealer (crm.services.receipts) links it into the chain after
commit under a lock of its own that only sealers take, in a transaction that
holds nothing else. Keep it that way: a lock shared by every write of a
business is what made approval decisions and dispatch deadlock. The outbox
is the same: an event is one INSERT (or rides in the receipts' one), and the
sequencer that numbers events after commit takes a lock only sequencers
take (crm.services.outbox), in a transaction that holds nothing else.
"""

from __future__ import annotations

from typing import TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def row_lock(obj: M, *related: str) -> M:
    """Lock `obj`'s row and re-read it into `obj` itself, in one query, with
    the `related` rows it will need: the caller's object is then current
    under the lock, and nothing reads it again after the change.

    FOR NO KEY UPDATE: writers of the row queue behind each other, while rows
    that only reference it (receipts, tasks, events) insert meanwhile; a
    plain FOR UPDATE makes their foreign-key check wait. `of` self: the
    joined rows are read, never locked (PostgreSQL cannot lock the nullable
    side of an outer join anyway). Take it inside `transaction.atomic()`.
    """
    queryset = type(obj)._default_manager.select_for_update(no_key=True, of=("self",)).select_related(*related)
    obj.refresh_from_db(from_queryset=queryset)
    return obj


def xact_locks(names: list[str]) -> None:
    """`xact_lock` for each name, in the order given, in one round trip."""
    if not names:
        return
    with connection.cursor() as cursor:
        # The subquery hands the names out in the array's order, and the
        # outer query takes each lock as its row comes: the order is the list's.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(n, 0)) FROM"
            " (SELECT n FROM unnest(%s::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i) AS names",
            [names],
        )


def xact_lock(name: str) -> None:
    """Wait for the transaction-scoped lock `name` (held until commit or
    rollback; re-entrant within the transaction). Take it inside
    `transaction.atomic()`: outside one it is released at once."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


def contact_lock_name(business_id: int, contact_id: int) -> str:
    """The named lock of one contact's identity (level 1, after its points')."""
    return f"identity:{business_id}:contact:{contact_id}"


def contacts_lock(business_id: int, contact_ids: list[int]) -> None:
    """The named identity locks of these contacts, in sorted name order and
    one round trip: a capture that matched two people and a merge of them
    take the same locks in the same order. Re-entrant: a lock the
    transaction holds already is taken again without waiting."""
    xact_locks(sorted({contact_lock_name(business_id, pk) for pk in contact_ids}))
