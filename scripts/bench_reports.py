"""Reporting benchmark (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://… .venv/bin/python scripts/bench_reports.py --leads 100000

Creates a scratch PostgreSQL database (`bench_reports`, dropped afterwards
unless --keep) and fills it set-based (INSERT … SELECT generate_series) with
`--leads` leads of one business and their contacts, phones, consent, source
touches, next-action tasks, messages in and out, appointments (held, no-show,
upcoming, past without outcome), estimates, jobs, invoices, payments and
refunds. Then it times, each `--repeat` times (median and worst printed):
Pipeline QA (first run, which opens the items, then a steady-state run), the
Slack alert scan, the daily brief of a manager and of a setter, and each page
as a logged-in manager renders it through the full Django stack (the daily
brief, the exception report and its CSV, the funnel, the leak audit, a lead's
trace page and `GET /api/v1/leads/<id>/trace/`, and the revenue page and API
when they exist), with the number of SQL queries each took.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=100_000, help="leads to create (default %(default)s)")
    parser.add_argument("--setters", type=int, default=10, help="setters sharing the leads (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per report (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_DATABASE_NAME", "bench_reports")
    import django

    django.setup()
    from django.db import connection

    if connection.vendor != "postgresql":
        sys.exit("bench_reports needs PostgreSQL: set DATABASE_URL=postgres://…")


def insert_select(model: Any, n: int, exprs: dict[str, str], *, where: str = "") -> int:
    """INSERT … SELECT over generate_series(1, n) AS g: `exprs` give SQL per
    column (in terms of g); every other column gets the field's default, so
    the rows look like the ORM's. Returns the first new id."""
    from django.db import connection
    from django.db.models import Max

    columns, values, params = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(connection.ops.quote_name(field.column))
        if field.name in exprs or field.attname in exprs:
            # Literal SQL beside %s parameters: its modulo signs are doubled.
            values.append((exprs.get(field.name) or exprs[field.attname]).replace("%", "%%"))
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            values.append("now()")
            continue
        default = None if field.null and not field.has_default() else field.get_default()
        values.append("%s")
        params.append(field.get_db_prep_save(default, connection))
    start = (model.objects.aggregate(m=Max("pk"))["m"] or 0) + 1
    sql = (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "  # noqa: S608 - our own column names
        f"SELECT {', '.join(values)} FROM generate_series(1, {int(n)}) AS g {where.replace('%', '%%')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return start


def pid(prefix: str) -> str:
    """A unique public id per row (26 characters after the prefix, like a ULID)."""
    return f"'{prefix}_BENCH' || lpad(g::text, 21, '0')"


def fill(n: int, setters: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from crm import models as m
    from crm.roles import roles_sync

    roles_sync()
    business = m.Business.objects.create(slug="bench", name="Bench Heating", timezone="America/Chicago")
    users = get_user_model()

    def member(username: str, role: str) -> m.TeamMember:
        user = users.objects.create_user(
            username=username,
            password="bench-pw-1",  # noqa: S106 - a scratch database's login
            is_staff=True,
            email=f"{username}@example.com",
        )
        user.groups.add(Group.objects.get(name=role))
        return m.TeamMember.objects.create(business=business, user=user, role=role, display_name=username)

    manager = member("mia", "manager")
    member("olga", "owner")
    team = [member(f"setter{i}", "setter") for i in range(setters)]
    team_ids = "ARRAY[" + ",".join(str(t.pk) for t in team) + "]"
    sources = [
        m.Source.objects.create(business=business, key=key, provider=provider, secret="s")  # noqa: S106
        for key, provider in (("gads", "google_ads"), ("fb", "meta"), ("site", "website"), ("tf", "typeform"))
    ]
    src_ids = "ARRAY[" + ",".join(str(s.pk) for s in sources) + "]"
    sequence = m.Sequence.objects.create(business=business, key="no_reply", trigger="no_reply", steps=[])
    b = business.pk
    created = "now() - ((g % 180) || ' days')::interval - ((g % 1440) || ' minutes')::interval"

    c0 = insert_select(
        m.Contact, n, {"public_id": pid("cont"), "business": str(b), "first_name": "'Pat'", "last_name": "'Doe' || g"}
    )
    p0 = insert_select(
        m.ContactPoint,
        n,
        {
            "public_id": pid("cp"),
            "business": str(b),
            "contact": f"{c0} + g - 1",
            "kind": "'phone'",
            "value": "'+1212' || lpad(g::text, 7, '0')",
        },
    )
    stage = (
        "CASE WHEN g % 20 < 6 THEN 'assigned' WHEN g % 20 < 10 THEN 'contacted' WHEN g % 20 < 12 THEN 'booked' "
        "WHEN g % 20 = 12 THEN 'appointment_held' WHEN g % 20 = 13 THEN 'estimate_sent' WHEN g % 20 = 14 THEN 'won' "
        "WHEN g % 20 < 17 THEN 'lost' WHEN g % 20 = 17 THEN 'no_show' ELSE 'new' END"
    )
    l0 = insert_select(
        m.Lead,
        n,
        {
            "public_id": pid("lead"),
            "business": str(b),
            "contact": f"{c0} + g - 1",
            "stage": stage,
            "owner": f"CASE WHEN g % 50 = 0 THEN NULL ELSE ({team_ids})[(g % {setters}) + 1] END",
            "next_action": "CASE WHEN g % 30 = 0 THEN '' ELSE 'Call back' END",
            "next_action_due_at": f"CASE WHEN g % 30 = 0 THEN NULL ELSE {created} + interval '1 day' END",
            "first_response_at": f"CASE WHEN g % 10 < 7 THEN {created} + ((g % 3600) || ' seconds')::interval END",
            "speed_to_lead_seconds": "CASE WHEN g % 10 < 7 THEN (g * 37) % 3600 END",
            "sla_breached_at": f"CASE WHEN g % 40 = 7 THEN {created} + interval '10 minutes' END",
            "closed_at": f"CASE WHEN g % 20 IN (14, 15, 16) THEN {created} + interval '3 days' END",
            "created_at": created,
            "updated_at": created,
        },
    )
    lead = f"{l0} + g - 1"
    insert_select(
        m.LeadTouch,
        n,
        {
            "public_id": pid("tch"),
            "business": str(b),
            "lead": lead,
            "source": f"({src_ids})[(g % 4) + 1]",
            "channel": "'form'",
            "provider": "'website'",
            "campaign_id": "'cmp' || (g % 12)",
            "received_at": created,
        },
    )
    e0 = insert_select(
        m.ConsentEvent,
        n,
        {
            "public_id": pid("cev"),
            "business": str(b),
            "contact_point": f"{p0} + g - 1",
            "channel": "'sms'",
            "action": "CASE WHEN g % 25 = 0 THEN 'revoke' ELSE 'grant' END",
            "basis": "'form_disclosure'",
            "actor": "'bench'",
            "at": created,
        },
        where="WHERE g % 10 < 6",
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO crm_consentstate (contact_point_id, channel, status, last_event_id, updated_at) "
            "SELECT contact_point_id, channel, CASE WHEN action = 'revoke' THEN 'revoked' ELSE 'granted' END, id, at "
            "FROM crm_consentevent WHERE id >= %s",
            [e0],
        )
    insert_select(
        m.Task,
        n,
        {
            "public_id": pid("task"),
            "business": str(b),
            "lead": lead,
            "owner": f"({team_ids})[(g % {setters}) + 1]",
            "title": "'Call back'",
            "due_at": "now() + ((g % 96) - 48 || ' hours')::interval",
        },
        where="WHERE g % 2 = 0 AND g % 20 < 14",
    )
    insert_select(
        m.Message,
        n,
        {
            "public_id": pid("msgo"),
            "business": str(b),
            "lead": lead,
            "contact": f"{c0} + g - 1",
            "direction": "'out'",
            "status": "CASE WHEN g % 33 = 0 THEN 'undelivered' WHEN g % 17 = 0 THEN 'blocked' ELSE 'delivered' END",
            "block_reason": "CASE WHEN g % 33 <> 0 AND g % 17 = 0 THEN 'quiet_hours' ELSE '' END",
            "idempotency_key": "'bench-out-' || g",
            "body": "'Hi Pat'",
            "created_at": f"{created} + interval '5 minutes'",
        },
    )
    insert_select(
        m.Message,
        n,
        {
            "public_id": pid("msgi"),
            "business": str(b),
            "lead": lead,
            "contact": f"{c0} + g - 1",
            "contact_point": f"{p0} + g - 1",
            "direction": "'in'",
            "status": "'received'",
            "body": "'Yes please'",
            "created_at": "now() - ((g % 72) || ' hours')::interval",
        },
        where="WHERE g % 5 = 0",
    )
    appt_status = (
        "CASE WHEN g % 20 IN (12, 13, 14) THEN 'held' WHEN g % 20 = 17 THEN 'no_show' "
        "WHEN g % 20 = 10 THEN 'scheduled' WHEN g % 20 = 11 THEN 'confirmed' ELSE 'canceled' END"
    )
    appt_start = (
        "CASE WHEN g % 20 = 10 THEN now() + ((g % 72) || ' hours')::interval ELSE "
        + created
        + " + interval '2 days' END"
    )
    insert_select(
        m.Appointment,
        n,
        {
            "public_id": pid("appt"),
            "business": str(b),
            "lead": lead,
            "status": appt_status,
            "starts_at": appt_start,
            "ends_at": f"({appt_start}) + interval '1 hour'",
            "external_id": "NULL",
        },
        where="WHERE g % 20 BETWEEN 10 AND 17",
    )
    insert_select(
        m.Estimate,
        n,
        {
            "public_id": pid("est"),
            "business": str(b),
            "lead": lead,
            "amount": "(g % 900) + 100",
            "status": "CASE WHEN g % 20 = 14 THEN 'accepted' ELSE 'sent' END",
            "sent_at": created,
        },
        where="WHERE g % 20 IN (13, 14)",
    )
    j0 = insert_select(
        m.Job,
        n,
        {
            "public_id": pid("job"),
            "business": str(b),
            "lead": lead,
            "status": "'completed'",
            "completed_at": f"{created} + interval '5 days'",
        },
        where="WHERE g % 20 = 14",
    )
    insert_select(
        m.Invoice,
        n // 20,
        {
            "public_id": pid("inv"),
            "business": str(b),
            "lead": f"(SELECT lead_id FROM crm_job WHERE id = {j0} + g - 1)",  # noqa: S608
            "job": f"{j0} + g - 1",
            "amount": "500",
            "status": "'issued'",
        },
        where="WHERE g % 2 = 0",
    )
    pay0 = insert_select(
        m.Payment,
        n,
        {
            "public_id": pid("pay"),
            "business": str(b),
            "lead": f"CASE WHEN g % 200 = 14 THEN NULL ELSE {lead} END",
            "match_status": "CASE WHEN g % 200 = 14 THEN 'unmatched' ELSE 'matched' END",
            "amount": "((g % 900) + 100)::numeric(12,2)",
            "received_at": "now() - ((g % 60) || ' days')::interval",
            "external_id": "NULL",
        },
        where="WHERE g % 20 = 14",
    )
    insert_select(
        m.Refund,
        n // 20,
        {
            "public_id": pid("rfnd"),
            "business": str(b),
            "payment": f"{pay0} + g - 1",
            "amount": "50.00",
            "refunded_at": "now() - ((g % 30) || ' days')::interval",
            "external_id": "NULL",
        },
        where="WHERE g % 10 = 0",
    )
    insert_select(
        m.Enrollment,
        n,
        {
            "public_id": pid("enr"),
            "business": str(b),
            "lead": lead,
            "contact": f"{c0} + g - 1",
            "sequence": str(sequence.pk),
            "status": "'active'",
            "next_step_due_at": "now() + ((g % 48) - 24 || ' hours')::interval",
        },
        where="WHERE g % 20 = 5",
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"business": business, "manager": manager, "setter": team[0], "lead_pk": l0 + 14}


def timed(label: str, repeat: int, fn: Callable[[], Any]) -> None:
    from django.db import connection, reset_queries

    times, queries = [], 0
    for _ in range(repeat):
        reset_queries()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        queries = len(connection.queries)
    print(
        f"{label:<42} median {statistics.median(times) * 1000:9.1f} ms   worst {max(times) * 1000:9.1f} ms   "
        f"{queries:4d} queries"
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    setup_django()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import NoReverseMatch, reverse
    from rest_framework.authtoken.models import Token

    setup_test_environment()
    settings.DEBUG = True  # count queries
    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=False)
    try:
        from agents.reporting.alerts import alerts_scan
        from agents.reporting.daily_brief import brief_build
        from agents.reporting.pipeline_qa import pipeline_qa_run
        from crm.models import ExceptionItem, Lead

        start = time.perf_counter()
        world = fill(args.leads, args.setters)
        print(f"database {name}: {Lead.objects.count()} leads filled in {time.perf_counter() - start:.1f} s")
        settings.DEBUG = True
        manager, setter = world["manager"], world["setter"]
        settings.SLACK_WEBHOOK_URL = "http://127.0.0.1:9/bench"  # alerts are queued, never posted here

        first = time.perf_counter()
        run = pipeline_qa_run()
        print(
            f"{'pipeline QA, first run':<42} {(time.perf_counter() - first) * 1000:9.1f} ms   opened "
            f"{sum(run.opened.values())} items: {run.opened}"
        )
        timed("pipeline QA, steady state", args.repeat, pipeline_qa_run)
        timed("alerts scan", args.repeat, alerts_scan)
        timed("daily brief, manager (build)", args.repeat, lambda: brief_build(manager))
        timed("daily brief, setter (build)", args.repeat, lambda: brief_build(setter))
        print(f"open exception items: {ExceptionItem.objects.filter(status='open').count()}")

        client = Client()
        client.force_login(manager.user)
        token = Token.objects.create(user=manager.user)
        api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
        lead = Lead.objects.get(pk=world["lead_pk"])
        pages = [
            ("page: daily brief", client, reverse("report-brief")),
            ("page: exception report", client, reverse("report-exceptions")),
            ("page: exception report CSV", client, reverse("report-exceptions") + "?format=csv"),
            ("page: funnel (90 days, by source, month)", client, reverse("report-funnel")),
            ("page: funnel (by owner, week)", client, reverse("report-funnel") + "?by=owner&period=week"),
            ("page: leak audit (90 days)", client, reverse("report-leaks")),
            ("page: lead trace", client, reverse("lead-trace", args=[lead.public_id])),
            ("api: GET /api/v1/leads/<id>/trace/", api, f"/api/v1/leads/{lead.public_id}/trace/"),
        ]
        try:
            pages.append(("page: revenue (crm.attribution)", client, reverse("revenue")))
            pages.append(("api: GET /api/v1/reports/revenue/?by=source", api, "/api/v1/reports/revenue/?by=source"))
        except NoReverseMatch:
            print("(no revenue page in this checkout)")

        def get(c: Client, url: str) -> None:
            response = c.get(url)
            if response.status_code != 200:
                raise SystemExit(f"{url}: HTTP {response.status_code}")
            response.getvalue()  # a streamed CSV is read to its end

        for label, page_client, url in pages:

            def fetch(c: Client = page_client, u: str = url) -> None:
                get(c, u)

            timed(label, args.repeat, fetch)
    finally:
        connection.close()
        if args.keep:
            print(f"kept database {name}")
        else:
            creation.destroy_test_db(name, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
