"""The setter's workspace at scale (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://… .venv/bin/python scripts/bench_workspace.py --leads 100000 --messages 1000000

Creates a scratch database (`bench_workspace`, dropped afterwards unless
--keep), fills it set-based as scripts/bench_reports.py does (leads of every
stage, their touches, tasks, consent, a message out and some in), then adds
messages until there are `--messages`: conversations of alternating texts in
and out, some ending with the person waiting. The conversation summary is
kept by its trigger as the messages go in, so the fill prints what the
trigger costs per message.

Then, through the full Django stack as a logged-in manager and setter, each
`--repeat` times (median and worst, and SQL queries): the inbox (first page,
a filtered page, a search, the live poll) and a busy lead's thread, side by
side with what a setter had before them, the stock admin changelist of leads
and the copilot page.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_reports  # the fill and the timer, shared


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=100_000, help="leads (default %(default)s)")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages in all (default %(default)s)")
    parser.add_argument("--setters", type=int, default=10, help="setters sharing the leads (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per page (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def conversations_fill(world: dict[str, Any], leads: int, total: int) -> None:
    """Messages up to `total`, spread over the leads as conversations: the
    person's messages and a setter's answers in turn, the answer last, but
    a lead in seven ends on a message in, so someone waits."""
    from django.db import connection
    from django.db.models import Min

    from crm import models as m

    have = m.Message.objects.count()
    extra = max(0, total - have)
    if extra < leads:
        return
    l0 = m.Lead.objects.aggregate(first=Min("pk"))["first"]
    c0 = m.Contact.objects.aggregate(first=Min("pk"))["first"]
    setter = world["setter"].user.username
    rounds = -(-extra // leads)  # each lead gets `rounds` more messages (at least `total` in all), in then out
    extra = rounds * leads
    k = f"((g - 1) / {leads})"  # which extra message of its lead this is
    lead_of = f"((g - 1) % {leads})"
    # Rounds alternate so that the last is our answer, but for a lead in
    # seven, whose person wrote last and waits.
    inbound = f"(({rounds - 1} - {k}) % 2 = 1 OR ({k} = {rounds - 1} AND {lead_of} % 7 = 0))"
    start = time.perf_counter()
    bench_reports.insert_select(
        m.Message,
        extra,
        {
            "public_id": bench_reports.pid("msgc"),
            "business": str(world["business"].pk),
            "lead": f"{l0} + {lead_of}",
            "contact": f"{c0} + {lead_of}",
            "direction": f"CASE WHEN {inbound} THEN 'in' ELSE 'out' END",
            "status": f"CASE WHEN {inbound} THEN 'received' ELSE 'delivered' END",
            "idempotency_key": f"CASE WHEN {inbound} THEN NULL ELSE 'bench-convo-' || g END",
            "actor": f"CASE WHEN {inbound} THEN '' ELSE '{setter}' END",
            "body": "CASE WHEN g % 3 = 0 THEN 'Can you come Tuesday morning?' WHEN g % 3 = 1 "
            "THEN 'Yes, Tuesday 9-11 works. See you then!' ELSE '¿Pueden venir el martes?' END",
            # The conversation is the lead's latest: its rounds twenty minutes
            # apart (the minute within them at random), the last one within the hour.
            "created_at": f"now() - (({rounds} - {k}) * 20 + floor(random() * 20) || ' minutes')::interval",
        },
    )
    took = time.perf_counter() - start
    print(f"{extra} messages added in {took:.1f} s ({took / extra * 1e6:.0f} µs a message, the trigger included)")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def held_and_urgent_fill(world: dict[str, Any]) -> None:
    """Of the conversations that wait, one in eleven wrote something urgent
    and one in thirteen has a setter's reply held for a manager: the
    inbox's first two parts, read along their own indexes."""
    from django.db import connection
    from django.db.models import Min

    from crm import models as m

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE crm_message SET urgent = true WHERE id IN (SELECT last_message_id FROM crm_conversation"
            " WHERE awaiting_since IS NOT NULL AND lead_id % 11 = 0)"
        )
        urgent = cursor.rowcount
    l0 = m.Lead.objects.aggregate(first=Min("pk"))["first"]
    c0 = m.Contact.objects.aggregate(first=Min("pk"))["first"]
    count = m.Lead.objects.count()
    held_leads = "(SELECT lead_id FROM crm_conversation WHERE awaiting_since IS NOT NULL AND lead_id % 13 = 0)"
    bench_reports.insert_select(
        m.Message,
        count,
        {
            "public_id": bench_reports.pid("msgh"),
            "business": str(world["business"].pk),
            "lead": f"{l0} + g - 1",
            "contact": f"{c0} + g - 1",
            "direction": "'out'",
            "status": "'pending_approval'",
            "idempotency_key": "'bench-held-' || g",
            "actor": f"'{world['setter'].user.username}'",
            "body": "'It is $89 to come out, we can do Tuesday.'",
            "created_at": "now()",
        },
        where=f"WHERE {l0} + g - 1 IN {held_leads}",
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    held = m.Conversation.objects.filter(held_since__isnull=False).count()
    print(f"{urgent} conversations made urgent, {held} with a reply held for approval")


def trigger_cost(world: dict[str, Any], n: int) -> None:
    """The same INSERT of `n` messages with the conversation trigger and
    without it (in a transaction rolled back), side by side."""
    from django.db import connection, transaction
    from django.db.models import Min

    from crm import models as m

    l0 = m.Lead.objects.aggregate(first=Min("pk"))["first"]
    exprs = {
        "public_id": bench_reports.pid("msgt"),
        "business": str(world["business"].pk),
        "lead": f"{l0} + (g % 1000)",
        "direction": "'in'",
        "status": "'received'",
        "body": "'hello'",
        "created_at": "now()",
    }
    figures = {}
    for label, disable in (("with the trigger", False), ("without it", True)):
        try:
            with transaction.atomic():
                if disable:
                    with connection.cursor() as cursor:
                        cursor.execute("ALTER TABLE crm_message DISABLE TRIGGER crm_message_conversation")
                start = time.perf_counter()
                bench_reports.insert_select(m.Message, n, exprs)
                figures[label] = time.perf_counter() - start
                raise _RolledBack
        except _RolledBack:
            pass
    print(
        f"{n} messages into 1,000 conversations: "
        + ", ".join(f"{label} {t * 1000:.0f} ms ({t / n * 1e6:.0f} µs each)" for label, t in figures.items())
    )


class _RolledBack(Exception):
    pass


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench_reports.setup_django()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import NoReverseMatch, reverse
    from django.utils import timezone

    setup_test_environment()
    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=False)
    try:
        from crm.inbox import InboxQuery, inbox_page
        from crm.models import Conversation, Lead, Message

        start = time.perf_counter()
        world = bench_reports.fill(args.leads, args.setters)
        print(f"database {name}: {Lead.objects.count()} leads filled in {time.perf_counter() - start:.1f} s")
        conversations_fill(world, args.leads, args.messages)
        print(
            f"{Message.objects.count()} messages, {Conversation.objects.count()} conversations, "
            f"{Conversation.objects.filter(awaiting_since__isnull=False).count()} waiting on a person"
        )
        if hasattr(Conversation, "held_since"):
            held_and_urgent_fill(world)
        trigger_cost(world, 10_000)
        settings.DEBUG = True  # count queries
        manager, setter = world["manager"], world["setter"]
        busy = Lead.objects.get(pk=world["lead_pk"])
        now = timezone.now()

        bench_reports.timed(
            "selector: inbox page 1, manager", args.repeat, lambda: inbox_page(manager.user, InboxQuery(), now=now)
        )
        bench_reports.timed(
            "selector: inbox page 1, setter", args.repeat, lambda: inbox_page(setter.user, InboxQuery(), now=now)
        )
        leader, one = Client(), Client()
        leader.force_login(manager.user)
        one.force_login(setter.user)
        pages: list[tuple[str, Client, str | None]] = [
            ("before: admin lead changelist, manager", leader, "/admin/crm/lead/"),
            ("before: admin lead changelist, setter", one, "/admin/crm/lead/"),
            ("before: admin lead page, manager", leader, reverse("admin:crm_lead_change", args=[busy.pk])),
        ]
        try:
            inbox = reverse("workspace:inbox")
            thread = reverse("workspace:thread", args=[busy.public_id])
        except NoReverseMatch:
            print("(no workspace pages in this checkout)")
        else:
            pages += [
                ("after: inbox, manager", leader, inbox),
                ("after: inbox, setter", one, inbox),
                ("after: inbox, needs reply, manager", leader, inbox + "?needs_reply=on"),
                ("after: inbox, search by phone, manager", leader, inbox + "?q=(212)%20000-0150"),
                ("after: inbox page 40, manager", leader, inbox + "?page=40"),
                ("after: inbox live poll, nothing new, manager", leader, None),
                ("after: thread, manager", leader, thread),
                ("after: thread live poll, nothing new, manager", leader, None),
            ]

        from leadops.workspace.selectors import inbox_version, thread_version

        def live(label: str) -> str:
            # A poll from a page that shows the current version: answered 204.
            if label.startswith("after: inbox live"):
                return reverse("workspace:inbox-live") + "?v=" + inbox_version(manager.user, now=timezone.now())
            v = thread_version(manager.user, busy, now=timezone.now())
            return reverse("workspace:thread-live", args=[busy.public_id]) + "?v=" + v

        for label, client, url in pages:

            def fetch(c: Client = client, u: str | None = url, name: str = label) -> None:
                target = u if u is not None else live(name)
                response = c.get(target, follow=False)
                if response.status_code not in (200, 204, 302):
                    raise SystemExit(f"{target}: HTTP {response.status_code}")

            bench_reports.timed(label, args.repeat, fetch)
    finally:
        connection.close()
        if args.keep:
            print(f"kept database {name}")
        else:
            creation.destroy_test_db(name, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
