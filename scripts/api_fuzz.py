"""Fuzz the API against its own OpenAPI schema, once per role (schemathesis).

    DATABASE_URL=postgres://… .venv/bin/python scripts/api_fuzz.py [--max-examples N] [--role R] [--seed S]

Creates a scratch PostgreSQL database (`api_fuzz`, or `$API_FUZZ_DATABASE_NAME`;
dropped afterwards unless --keep), loads the demo business (`load_demo`) and
an outsider's business beside it, opens a high-value estimate waiting for
approval, and gives each role an API token: the demo business's owner,
manager, setter and technician, the owner of the other business (`outsider`),
and no token at all (`anonymous`). For each role it loads `/api/schema/` from
the app in-process (WSGI, no server), lets schemathesis generate requests
for every operation (its coverage and fuzzing phases, valid and invalid
input, reusing ids from earlier responses so real records are read and
written) and checks every response: no 5xx, a documented status code, a
documented content type, a body that matches the documented schema.

Prints one summary per role and exits 1 when any check failed. `make test`
runs the same through `tests/leadops/test_api_fuzz.py` on a few examples.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Role -> the demo username behind it (`None`: no token).
ROLES: dict[str, str | None] = {
    "owner": "olivia",
    "manager": "mia",
    "setter": "sam",
    "technician": "tom",
    "outsider": "otto",
    "anonymous": None,
}
OUTSIDER_SLUG = "outsider-plumbing"
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance")


@dataclass(frozen=True)
class Finding:
    operation: str
    check: str
    title: str
    message: str
    status: int | None
    reproduce: str
    response: str


@dataclass
class RoleReport:
    role: str
    seconds: float = 0.0
    app_seconds: float = 0.0  # of `seconds`, inside the app
    operations: set[str] = field(default_factory=set)
    statuses: Counter[int] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings and not self.errors and bool(self.statuses)

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())

    def lines(self) -> list[str]:
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        head = "ok" if self.ok else "FAILED"
        out = [
            f"{self.role:<11} {head:<7} {len(self.operations)} operations, {self.cases} requests in "
            f"{self.seconds:.1f} s, {self.app_seconds:.1f} s of it in the app ({statuses or 'no responses'})"
        ]
        # One line per distinct problem, with one request that shows it.
        seen: set[tuple[str, str, str]] = set()
        for finding in self.findings:
            key = (finding.operation, finding.check, finding.title)
            if key in seen:
                continue
            seen.add(key)
            same = sum(1 for f in self.findings if (f.operation, f.check, f.title) == key)
            out.append(f"  {finding.operation}: {finding.check}: {finding.title} (x{same})")
            out.extend(f"      {line}" for line in finding.message.splitlines()[:6])
            out.append(f"      {finding.reproduce}")
            if finding.response:
                out.append(f"      -> {finding.status} {finding.response}")
        out.extend(f"  error: {error}" for error in self.errors)
        return out


# ------------------------------------------------------------------ the data


def world_create() -> dict[str, str | None]:
    """The demo business, the outsider's business and one API token per
    role; returns role -> token key (`None` for anonymous). Idempotent."""
    from rest_framework.authtoken.models import Token

    from crm.models import Role, TeamMember
    from devtools.demo import demo_load
    from tests.factories import BusinessFactory, lead_create, member_create

    demo_load()
    outsider = BusinessFactory.create(slug=OUTSIDER_SLUG, name="Outsider Plumbing")
    if not TeamMember.objects.filter(business=outsider).exists():
        member_create(outsider, Role.OWNER, username=ROLES["outsider"])
        lead_create(outsider, first_name="Olga", last_name="Other", phone="+12125550199", actor="api_fuzz")
    tokens: dict[str, str | None] = {}
    for role, username in ROLES.items():
        if username is None:
            tokens[role] = None
            continue
        member = TeamMember.objects.select_related("user").get(user__username=username)
        tokens[role] = Token.objects.get_or_create(user=member.user)[0].key
    return tokens


def pending_ensure() -> None:
    """A high-value estimate waiting for approval, and a draft beside it, so
    that each role's run finds something to decide, send, accept and decline
    (an earlier role's run may have used them up)."""
    from decimal import Decimal

    from agents.followup.estimates import estimate_send
    from approvals.models import ApprovalRequest
    from crm.models import Estimate, Lead, Stage
    from crm.services.records import estimate_record
    from devtools.demo import DEMO_SLUG

    lead = (
        Lead.objects.filter(business__slug=DEMO_SLUG, stage__in=[Stage.APPOINTMENT_HELD, Stage.ESTIMATE_SENT])
        .select_related("business", "owner__user", "service_line")
        .order_by("pk")
        .first()
    )
    if lead is None:
        return
    actor = lead.owner.user.get_username() if lead.owner else "api_fuzz"
    user = lead.owner.user if lead.owner else None
    if not ApprovalRequest.objects.filter(lead__business=lead.business, status=ApprovalRequest.Status.PENDING).exists():
        estimate = estimate_record(lead=lead, amount=Decimal("25000.00"), currency=lead.business.currency, actor=actor)
        estimate_send(estimate, actor=actor, user=user)
    if not Estimate.objects.filter(lead=lead, status=Estimate.Status.DRAFT).exists():
        estimate_record(lead=lead, amount=Decimal("950.00"), currency=lead.business.currency, actor=actor)


# ------------------------------------------------------------------ the run


def fuzz_role(role: str, token: str | None, *, max_examples: int, seed: int, coverage: bool = True) -> RoleReport:
    """Run schemathesis against `/api/schema/` in-process as one role: its
    coverage phase (each parameter's boundaries and wrong types, about a
    thousand requests whatever `max_examples` says) unless `coverage` is
    false, then `max_examples` generated cases per operation."""
    import schemathesis
    from django.core.handlers.wsgi import WSGIHandler
    from schemathesis.engine import events, from_schema

    report = RoleReport(role=role)
    config = schemathesis.Config.from_dict(
        {
            "seed": seed,
            # Nothing learnt is kept between runs (no `.schemathesis/` cache,
            # no Hypothesis example database): a run is its seed and the data.
            "cache": {"enabled": False},
            "workers": 1,
            "headers": {"Authorization": f"Token {token}"} if token else {},
            "generation": {"max-examples": max_examples, "database": "none"},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            # Stateful runs need links the schema does not declare; the
            # fuzzing phase already reuses ids seen in earlier responses.
            # Methods an operation does not have are left out: a 405 is DRF's.
            "phases": {
                "coverage": {"enabled": coverage, "unexpected-methods": []},
                "stateful": {"enabled": False},
            },
        }
    )
    started = time.perf_counter()
    schema = schemathesis.openapi.from_wsgi("/api/schema/", _closing(WSGIHandler(), report), config=config)
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            _scenario_read(report, event.recorder)
        elif isinstance(event, events.NonFatalError):
            report.errors.append(f"{event.label}: {event.info.title}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            report.errors.append(f"fatal: {event.exception!r}")
    report.seconds = time.perf_counter() - started
    return report


def _closing(handler: Any, report: RoleReport) -> Any:
    """The app as schemathesis calls it, from a worker thread: the in-process
    client never closes a response, so Django would never send
    `request_finished`; close it here, and the thread's database connection
    with it, or the scratch database could not be dropped afterwards."""
    from django.db import connections

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        started = time.perf_counter()
        response = handler(environ, start_response)
        try:
            return [b"".join(response)]
        finally:
            response.close()
            connections.close_all()
            report.app_seconds += time.perf_counter() - started

    return app


def _scenario_read(report: RoleReport, recorder: Any) -> None:
    report.operations.add(recorder.label)
    for interaction in recorder.interactions.values():
        if interaction.response is not None:
            report.statuses[interaction.response.status_code] += 1
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.failure_info is None:
                continue
            interaction = recorder.interactions.get(case_id)
            response = interaction.response if interaction is not None else None
            body = response.content[:300].decode("utf-8", "replace") if response is not None else ""
            body = " ".join(body.split())
            failure = check.failure_info.failure
            report.findings.append(
                Finding(
                    operation=recorder.label,
                    check=check.name,
                    title=failure.title,
                    message=str(failure.message),
                    status=response.status_code if response is not None else None,
                    reproduce=check.failure_info.code_sample,
                    response=body,
                )
            )


def fuzz_all(
    roles: list[str], *, max_examples: int, seed: int, coverage: bool = True, echo: bool = False
) -> list[RoleReport]:
    """Build the data, then fuzz each role in turn (printing each summary
    as it is done when `echo`)."""
    tokens = world_create()
    reports = []
    for role in roles:
        pending_ensure()
        report = fuzz_role(role, tokens[role], max_examples=max_examples, seed=seed, coverage=coverage)
        if echo:
            print("\n".join(report.lines()), flush=True)
        reports.append(report)
    return reports


def quiet() -> None:
    """Every 4xx is logged by Django and every enqueue by django-q: the
    summary says what matters. A 5xx's traceback still prints."""
    logging.getLogger("django.request").setLevel(logging.ERROR)
    logging.getLogger("django.server").setLevel(logging.ERROR)
    logging.getLogger("django-q").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="No directory at")


# ------------------------------------------------------------------ the command


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=50, help="examples per operation (default %(default)s)")
    parser.add_argument("--role", choices=list(ROLES), action="append", help="only this role (repeatable)")
    parser.add_argument("--seed", type=int, default=None, help="the random seed (default: a new one, printed)")
    parser.add_argument("--no-coverage", action="store_true", help="skip the coverage phase (faster)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    os.environ["TEST_DATABASE_NAME"] = os.environ.get("API_FUZZ_DATABASE_NAME", "api_fuzz")
    # One caller sends thousands of requests a minute here: at the default
    # throttle half of them would be answered 429 and check nothing else (the
    # throttle has its own tests, and its 429 is in the schema).
    os.environ.setdefault("API_THROTTLE_USER", "1000000/minute")
    os.environ.setdefault("API_THROTTLE_ANON", "1000000/minute")
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    if connection.vendor != "postgresql":
        sys.exit("api_fuzz needs PostgreSQL: set DATABASE_URL=postgres://…")
    quiet()
    setup_test_environment()  # ALLOWED_HOSTS accepts the in-process client's host
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=False)
    try:
        print(f"database {name}, seed {seed}, {args.max_examples} examples per operation")
        reports = fuzz_all(
            args.role or list(ROLES),
            max_examples=args.max_examples,
            seed=seed,
            coverage=not args.no_coverage,
            echo=True,
        )
    finally:
        if not args.keep:
            connection.close()
            creation.destroy_test_db(name, verbosity=0, keepdb=False)
    failed = [r.role for r in reports if not r.ok]
    print(f"api_fuzz: {len(reports) - len(failed)} roles ok" + (f", failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
