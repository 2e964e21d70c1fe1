"""The SQL statements one new website lead costs, listed (a benchmark, not a
test: it prints; tests/leadops/test_lead_statements.py holds the budget).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops .venv/bin/python scripts/bench_lead_statements.py [--sql]

Creates a scratch database beside DATABASE_URL's (`bench_lead_statements`, or
BENCH_DATABASE_NAME; dropped afterwards), loads the demo business file, posts
one new website lead to the real webhook and runs every task it leads to, as a
worker would (scripts/lead_statements.py). Prints the statements of the
acceptance and of the tasks grouped by kind and table, counted three ways:
all of them, without savepoints, and "realistic" (a receipt costing one
INSERT, as the receipt redesign makes it). `--sql` lists every statement.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sql", action="store_true", help="list every statement too")
    args = parser.parse_args(argv)
    bench_servers.django_setup(os.environ.get("BENCH_DATABASE_NAME", "bench_lead_statements"))
    name = bench_servers.scratch_database_create()
    try:
        from crm.services.business_file import business_file_load
        from scripts.lead_statements import grouped, kind, new_website_lead, table

        business_file_load(bench_servers.ROOT / "demo" / "acme-hvac.yaml")
        cost = new_website_lead()
        for label, part in (("acceptance (the webhook request)", cost.acceptance), ("tasks", cost.tasks)):
            print(
                f"{label}: {len(part.sql)} statements, {len(part.statements)} without savepoints, "
                f"{len(part.realistic)} realistic (receipt chain lock and tail read: {len(part.receipt_overhead)})"
            )
            for k, t, n in grouped(part.realistic):
                print(f"  {n:3}  {k:<7} {t}")
            if args.sql:
                for sql in part.sql:
                    print(f"     {kind(sql):<9} {table(sql):<28} {sql[:160]}")
        total = len(cost.acceptance.realistic) + len(cost.tasks.realistic)
        print(f"tasks run: {', '.join(cost.task_names)}")
        print(f"end to end, realistic: {total} statements ({len(cost.tasks.realistic)} in the tasks)")
        lead = cost.lead
        print(f"lead {lead.public_id}: stage {lead.stage}, owner {lead.owner}, next action {lead.next_action!r}")
    finally:
        bench_servers.scratch_database_drop(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
