"""Fault injection you can rerun: ordinary faults against the real web server
(gunicorn), the real django-q2 cluster (`manage.py qcluster`) and a local
Twilio-compatible server (scripts/fake_twilio.py), then the invariants
checked from outside. A drill, not a benchmark: it prints counts.

    .venv/bin/python scripts/fault_drill.py [--runs kill9:orm,kill9:redis,pg-restart:orm,...] [--json]

Faults (each run is one fault with one broker):

* `kill9`: the provider is slow, so texts are in flight; the whole cluster
  (every process it forked) is killed with SIGKILL mid-send, and a new one
  started;
* `pg-restart`: PostgreSQL is restarted (`pg_ctl restart -m immediate`:
  every backend killed, crash recovery) while the burst is being posted and
  processed; the poster redelivers what was refused, as providers do;
* `storm`: the provider answers a run of 503s (taken and not), 429s with
  Retry-After, timeouts and dropped connections (before and after taking the
  text), then recovers.

Each run has everything of its own: a private PostgreSQL (a copy of a
migrated template, on a free port in a temporary folder: the drill restarts
it, so it is never a server anyone else uses), a private redis-server for
`:redis`, the fake provider, one gunicorn (2 workers) and one cluster (the
default 2 workers). Runs go in parallel (`--jobs`). After the fault, the
drill waits (polling, with a deadline past the sweeps' bound) until nothing
is left in flight, nudging the periodic jobs to run now once something is
older than the bound, and counts:

* lost events: deliveries answered 200 whose event is not `processed`,
  people accepted without a lead, and leads whose acknowledgement was never
  decided (no `ack:` message);
* duplicate sends: texts the provider took more than once for one message
  (idempotency key), plus message rows sharing an idempotency key;
* stuck without exception item: outbound messages `queued`, `sending` or
  `unknown` older than the bound with no open exception item;
* chain intact: `manage.py verify_receipts --checkpoint` (the checkpoint
  exported before the fault) passes.

Exit status 0 when every run shows 0, 0, 0 and an intact chain.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.fake_twilio import SMART_ENCODING, FakeTwilio  # noqa: E402
from scripts.private_postgres import PrivatePostgres, bin_dir, free_port, initdb, private_workdir  # noqa: E402

FAULTS = ("kill9", "pg-restart", "storm")
BROKERS = ("orm", "redis")
DATABASE = "drill"
SECRET_KEY = "drill-only-insecure-key-never-use-it-to-serve-anything-0123456789"  # noqa: S105
CHECKPOINT_KEY = base64.b64encode(bytes(range(32))).decode()  # drill-only, public: signs nothing real
SID, TOKEN, SERVICE = "AC" + "d" * 32, "drill-auth-token", "MG" + "d" * 32
SITE_SECRET = "drill-site-secret"  # noqa: S105
BUSINESS = f"""
business: {{slug: drill, name: Drill HVAC, timezone: America/New_York, region: US}}
sources:
  - {{key: site, provider: website, secret: "{SITE_SECRET}"}}
templates:
  - {{key: ack_sms, channel: sms, approved: true,
      body: "Hi {{first_name}}, this is {{business}}. We got your request. Reply STOP to opt out."}}
team:
  - {{username: dro, name: Dee Owner, email: dee@drill.example, role: owner}}
  - {{username: drm, name: Dan Manager, email: dan@drill.example, role: manager}}
  - {{username: drs, name: Dot Setter, email: dot@drill.example, role: setter, max_open_leads: 500}}
"""
CONSENT = "I agree that Drill HVAC may call and text me, including automated texts. Reply STOP to opt out."
NAMES = ("Ava", "Ben", "Cora", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jade", "Kai", "Lena", "Milo", "Nia",
         "Omar", "Pia", "Quin", "Rosa", "Sam", "Tess", "Uma", "Vik", "Wren", "Xena")  # fmt: skip
IN_FLIGHT = ("queued", "sending", "unknown")
# The event sweep's wait before it takes a `received` event as a lost enqueue
# (agents.capture.processing.UNCLAIMED), in seconds.
EVENT_UNCLAIMED = 120
# One storm: every kind of bad answer, twice, then the provider recovers.
STORM = ["5xx", "429", "timeout", "drop", "5xx-taken", "drop-taken"] * 2


@dataclass
class Report:
    fault: str
    broker: str
    accepted: int = 0  # deliveries answered 200 (repeats included)
    refused: int = 0  # answers other than 200 (each redelivered until accepted)
    people: int = 0
    leads: int = 0
    lost_events: int = 0
    duplicate_sends: int = 0
    stuck_without_exception_item: int = 0
    chain_intact: bool = False
    settled: bool = False  # nothing in flight before the deadline
    seconds: float = 0.0
    messages: dict[str, int] = field(default_factory=dict)
    provider_answers: dict[str, int] = field(default_factory=dict)
    exception_items: int = 0
    detail: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost_events or self.duplicate_sends or self.stuck_without_exception_item) and self.chain_intact


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- Processes ---------------------------------------------------------------


@dataclass
class Process:
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill9(self) -> None:
        """SIGKILL to it and everything it forked: a machine that died."""
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # workers left behind by a parent that exited

    def tail(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def start(command: list[str], env: dict[str, str], log_path: Path) -> Process:
    with log_path.open("ab") as out:
        popen = subprocess.Popen(  # noqa: S603 (our own servers, our arguments)
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Process(popen, log_path)


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("the Redis runs need Debian's redis-server (apt-get install redis-server)")
    port = free_port()
    server = subprocess.Popen(  # noqa: S603
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--logfile",
            str(workdir / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        poll(lambda: _pings(client), 20, "redis-server answers")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _pings(client: Any) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def poll(ready: Callable[[], bool], deadline_s: float, what: str, *, every: float = 0.2) -> None:
    deadline = time.monotonic() + deadline_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {deadline_s:.0f} s: {what}")
        time.sleep(every)


# --- The template database -----------------------------------------------------


def template_build(workdir: Path, seed_from: str = "") -> PrivatePostgres:
    """A stopped private server holding the migrated `drill` database: from a
    dump of `seed_from` (an already migrated database: fast) or by `migrate`."""
    server = initdb(workdir)
    server.create_database(DATABASE)
    target = server.url(DATABASE)
    if seed_from:
        dump = subprocess.run(  # noqa: S603
            [str(bin_dir() / "pg_dump"), "--no-owner", "--no-privileges", "-d", seed_from],
            check=True,
            capture_output=True,
        )
        # Column attribute options (`ALTER COLUMN … SET (…)`) are none of our
        # migrations' doing, and a server may keep private ones another
        # version refuses (one here keeps `pg_attver`): left out.
        sql = re.sub(rb"(?m)^ALTER TABLE ONLY \S+ ALTER COLUMN \S+ SET \(.*\);\n", b"", dump.stdout)
        restored = subprocess.run(  # noqa: S603
            [str(bin_dir() / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", target], input=sql, capture_output=True
        )
        if restored.returncode:
            raise RuntimeError(f"restoring {seed_from} failed: {restored.stderr.decode()[-2000:]}")
    else:
        env = {
            **os.environ,
            "DATABASE_URL": target,
            "SECRET_KEY": SECRET_KEY,
            "DJANGO_SETTINGS_MODULE": "leadops.settings",
        }
        subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True)  # noqa: S603
    server.stop("fast")
    return server


# --- One run -------------------------------------------------------------------


class Drill:
    """One fault with one broker, in this process (its Django is set up for
    the run's private database)."""

    def __init__(self, fault: str, broker: str, server: PrivatePostgres, workdir: Path, redis_url: str, args: Any):
        self.fault, self.broker, self.server, self.workdir = fault, broker, server, workdir
        self.args = args
        self.bound = args.bound
        self.twilio = FakeTwilio({SID: TOKEN}).start()
        self.report = Report(fault, broker)
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "Q_BROKER", "TEST_DATABASE_NAME")},
            "DATABASE_URL": server.url(DATABASE),
            "DJANGO_SETTINGS_MODULE": "leadops.settings",
            "DEBUG": "false",
            "SECRET_KEY": os.environ.get("SECRET_KEY", SECRET_KEY),
            # The drill's own checkpoint key (export_receipt_checkpoint refuses to export unsigned).
            "RECEIPT_CHECKPOINT_KEY": CHECKPOINT_KEY,
            "SEND_MODE": "live",
            "TWILIO_ACCOUNT_SID": SID,
            "TWILIO_AUTH_TOKEN": TOKEN,
            "TWILIO_MESSAGING_SERVICE_SID": SERVICE,
            "TWILIO_API_BASE_URL": self.twilio.url,
            "PUBLIC_BASE_URL": "http://127.0.0.1:9",
            # The sweeps' bounds (their lowest allowed), so a drill takes minutes, not ten.
            "MESSAGE_SENDING_STALE_SECONDS": str(self.bound),
            "MESSAGE_QUEUED_STALE_SECONDS": str(self.bound),
        }
        if broker == "redis":
            self.env.update(Q_BROKER="redis", REDIS_URL=redis_url)
        self.web: Process | None = None
        self.clusters: list[Process] = []
        self.accepted: set[str] = set()  # nonces answered 200
        self.people: set[int] = set()
        self._lock = threading.Lock()

    # Processes
    def web_start(self) -> None:
        port = free_port()
        self.web_url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "leadops.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--log-level",
            "warning",
        ]
        self.web = start(command, self.env, self.workdir / "gunicorn.log")

        def answers() -> bool:
            import requests

            assert self.web is not None and self.web.alive(), f"gunicorn exited:\n{self.web.tail() if self.web else ''}"
            try:
                return requests.get(self.web_url + "/healthz/", timeout=5).status_code < 500
            except requests.RequestException:
                return False

        poll(answers, 60, "gunicorn answers")

    def cluster_start(self) -> Process:
        n = len(self.clusters) + 1
        cluster = start([sys.executable, "manage.py", "qcluster"], self.env, self.workdir / f"qcluster-{n}.log")
        self.clusters.append(cluster)
        return cluster

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )

    # Load
    def deliveries(self) -> list[tuple[int, str, bytes]]:
        """(person, nonce, body): one form per person, every fourth delivered twice (a provider's repeat)."""
        out = []
        for person in range(self.args.people):
            name = NAMES[person % len(NAMES)] + ("" if person < len(NAMES) else f"{person}")
            body = json.dumps(
                {
                    "first_name": name,
                    "last_name": "Drill",
                    "phone": f"+1212555{1000 + person:04d}",
                    "message": "our furnace stopped working",
                    "consent": "yes",
                    "consent_text": CONSENT,
                    "nonce": f"p{person}",
                }
            ).encode()
            out.append((person, f"p{person}", body))
        return out + [d for i, d in enumerate(list(out)) if i % 4 == 0]

    def deliver(self, item: tuple[int, str, bytes], deadline: float) -> None:
        """Post until answered 200, as a provider redelivers (briefly backing off)."""
        import requests

        person, nonce, body = item
        headers = {"Authorization": f"Bearer {SITE_SECRET}", "Content-Type": "application/json"}
        while time.monotonic() < deadline:
            try:
                status = requests.post(
                    self.web_url + "/hooks/forms/site/", data=body, headers=headers, timeout=30
                ).status_code
            except requests.RequestException:
                status = 0
            with self._lock:
                if status == 200:
                    self.report.accepted += 1
                    self.accepted.add(nonce)
                    self.people.add(person)
                    return
                self.report.refused += 1
            time.sleep(0.5)

    def post_burst(self, *, during: Callable[[], None] | None = None) -> None:
        items = self.deliveries()
        deadline = time.monotonic() + 120
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = [pool.submit(self.deliver, item, deadline) for item in items]
            if during is not None:
                during()
            for future in futures:
                future.result()

    # State, read through the ORM (reconnecting after a database restart)
    def query(self, read: Callable[[], Any]) -> Any:
        from django.db import DatabaseError, connection

        try:
            return read()
        except DatabaseError:
            connection.close()
            return None

    def in_flight(self) -> list[Any]:
        from crm.models import ExceptionItem, Message

        flagged = ExceptionItem.objects.filter(status="open").values("subject")
        return list(
            Message.objects.filter(direction="out", status__in=IN_FLIGHT)
            .exclude(public_id__in=flagged)
            .values_list("public_id", "status", "created_at")
        )

    def events_open(self) -> list[Any]:
        from crm.models import InboundEvent

        return list(
            InboundEvent.objects.exclude(status__in=["processed", "ignored", "failed"]).values_list(
                "received_at", flat=True
            )
        )

    def leads_without_ack(self) -> list[str]:
        """Leads whose new-lead step has not decided their acknowledgement yet (no `ack:` message)."""
        from crm.models import Lead, Message

        decided = Message.objects.filter(idempotency_key__startswith="ack:").values("lead_id")
        return list(Lead.objects.exclude(pk__in=decided).values_list("contact__first_name", flat=True))

    def settle(self, since: float) -> None:
        """Wait until nothing is in flight, or the deadline (the bound, then
        time for two sweeps). Once something in flight is older than the
        bound, every periodic job is told to run now (the cluster's own
        scheduler then runs it) rather than at its next minute."""
        from django.utils import timezone
        from django_q.models import Schedule

        # An event no intake loop claimed waits EVENT_UNCLAIMED for the event sweep.
        deadline = since + max(self.bound, EVENT_UNCLAIMED) + self.args.grace
        nudged = 0.0
        while time.monotonic() < deadline:
            for cluster in self.clusters[-1:]:
                if not cluster.alive():
                    self.report.detail.append(f"the cluster exited:\n{cluster.tail()}")
                    return
            state = self.query(
                lambda: (self.events_open(), self.in_flight(), self.twilio.storm_left(), self.leads_without_ack())
            )
            if state is not None:
                open_events, flying, storm_left, undecided = state
                if not open_events and not flying and not storm_left and not undecided:
                    self.report.settled = True
                    return
                now = timezone.now()
                late = any(created < now - timedelta(seconds=self.bound) for _, _, created in flying) or any(
                    received < now - timedelta(seconds=EVENT_UNCLAIMED) for received in open_events
                )
                if late and time.monotonic() - nudged > 20:
                    self.query(
                        lambda: Schedule.objects.filter(name__startswith="leadops.").update(next_run=timezone.now())
                    )
                    nudged = time.monotonic()
            time.sleep(0.5)

    # Checks
    def check(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from crm.models import ExceptionItem, InboundEvent, Lead, Message

        connection.close()
        r = self.report
        r.people = len(self.people)
        processed = set(InboundEvent.objects.filter(status="processed").values_list("external_id", flat=True))
        lost = sorted(n for n in self.accepted if f"site:{n}" not in processed)
        leads = Counter(Lead.objects.values_list("contact__first_name", flat=True))
        r.leads = sum(leads.values())
        names = {NAMES[p % len(NAMES)] + ("" if p < len(NAMES) else f"{p}") for p in self.people}
        without_lead = sorted(n for n in names if not leads.get(n))
        # A lead whose acknowledgement was never decided lost the rest of its event's work.
        undecided = self.leads_without_ack()
        r.lost_events = len(lost) + len(without_lead) + len(undecided)
        if undecided:
            r.detail.append(f"leads without an acknowledgement decision: {sorted(undecided)}")
        if lost or without_lead:
            events = dict(InboundEvent.objects.values_list("external_id", "status"))
            r.detail.append(f"lost: {[(n, events.get(f'site:{n}')) for n in lost]} without a lead: {without_lead}")
        if doubled := sorted(n for n, c in leads.items() if c > 1):
            r.detail.append(f"more than one lead: {doubled}")

        outbound = Message.objects.filter(direction="out")
        r.messages = dict(Counter(outbound.values_list("status", flat=True)))
        keys = Counter(outbound.values_list("idempotency_key", flat=True))
        doubled_rows = {k: c for k, c in keys.items() if k and c > 1}
        by_text = {
            (to, body.translate(SMART_ENCODING).strip()): key
            for to, body, key in outbound.values_list("to", "body", "idempotency_key")
        }
        taken = Counter(by_text.get((m["to"], m["body"]), f"(no message) {m['to']}") for m in self.twilio.taken())
        doubled_sends = {k: c for k, c in taken.items() if c > 1}
        r.duplicate_sends = sum(c - 1 for c in doubled_sends.values()) + sum(c - 1 for c in doubled_rows.values())
        if doubled_sends or doubled_rows:
            r.detail.append(f"sent more than once: {doubled_sends} rows: {doubled_rows}")
        r.provider_answers = dict(self.twilio.answered)

        cut = timezone.now() - timedelta(seconds=self.bound)
        stuck = [(p, s) for p, s, created in self.in_flight() if created < cut]
        r.stuck_without_exception_item = len(stuck)
        if stuck:
            r.detail.append(f"stuck without exception item: {stuck}")
        r.exception_items = ExceptionItem.objects.filter(status="open").count()
        connection.close()

        verified = self.manage("verify_receipts", "--checkpoint", str(self.workdir / "checkpoints.jsonl"))
        r.chain_intact = verified.returncode == 0
        if not r.chain_intact:
            r.detail.append(f"verify_receipts: {verified.stdout[-500:]}{verified.stderr[-1500:]}")

    # The faults
    def fault_kill9(self) -> None:
        from crm.models import InboundEvent, Message

        self.twilio.behave("ok", delay=self.args.slow)

        def kill_mid_send() -> None:
            # Mid-send: a text taken by the provider and not yet answered, and
            # (so that the kill hits the sends) the deliveries so far processed.
            def sending() -> bool:
                state = self.query(
                    lambda: (
                        Message.objects.filter(status="sending").count(),
                        InboundEvent.objects.exclude(status__in=["processed", "ignored", "failed"]).count(),
                    )
                )
                return bool(state and state[0] and self.twilio.in_flight and not state[1])

            try:
                poll(sending, 60, "a text in flight")
            except TimeoutError:
                self.report.detail.append("no quiet moment with a text in flight: killed at the deadline")
            # The provider's count is read at the kill, not after it: a text
            # answered while the kill (or a query before it) took its time
            # was still in flight when the cluster died. The sending rows do
            # not change once the cluster is dead, so they are read after.
            at_provider = self.twilio.in_flight
            self.clusters[-1].kill9()
            flying = self.query(lambda: Message.objects.filter(status="sending").count())
            self.report.detail.append(
                f"killed the cluster with {flying} messages sending, {at_provider} at the provider"
            )
            self.twilio.behave("ok")
            self.cluster_start()

        self.post_burst(during=kill_mid_send)

    def fault_pg_restart(self) -> None:
        self.twilio.behave("ok", delay=0.2)
        half = (self.args.people + 1) // 2

        def restart_mid_burst() -> None:
            poll(lambda: self.report.accepted >= half, 60, "half the burst accepted")
            away = self.server.restart("immediate")
            self.report.detail.append(
                f"PostgreSQL restarted (immediate) after {self.report.accepted} accepted; away {away:.1f} s"
            )

        self.post_burst(during=restart_mid_burst)

    def fault_storm(self) -> None:
        self.twilio.storm(STORM)
        self.post_burst()
        # The storm passes when its answers are used up; the provider is fine after.
        poll(lambda: not self.twilio.storm_left(), 120, "the storm's answers used up", every=0.5)

    def run(self) -> Report:
        started = time.monotonic()
        from django.db import connection

        from crm.models import Business
        from crm.services.business_file import business_file_parse, business_spec_apply

        business_spec_apply(business_file_parse(BUSINESS, path="drill.yaml"))
        from datetime import time as clock

        # Any hour is inside the texting window, so the drill sends whenever it runs.
        Business.objects.filter(slug="drill").update(quiet_hours_start=clock.min, quiet_hours_end=clock.max)
        connection.close()
        exported = self.manage("export_receipt_checkpoint", "--to", str(self.workdir / "checkpoints.jsonl"))
        if exported.returncode:
            raise RuntimeError(f"export_receipt_checkpoint failed: {exported.stderr[-2000:]}")
        try:
            self.web_start()
            self.cluster_start()
            getattr(self, "fault_" + self.fault.replace("-", "_"))()
            log(f"{self.fault}:{self.broker}: fault done, {self.report.accepted} accepted; settling")
            self.settle(time.monotonic())
            if self.fault != "pg-restart":  # where every process meets a dead connection once
                for process in [self.web, *self.clusters]:
                    if process is not None and "Traceback" in process.tail(200_000):
                        self.report.detail.append(f"{process.log.name} has a traceback:\n{process.tail(1500)}")
        finally:
            for process in [*self.clusters, self.web]:
                if process is not None:
                    process.stop()
            self.twilio.stop()
        self.check()
        self.report.seconds = round(time.monotonic() - started, 1)
        return self.report


def run_one(fault: str, broker: str, template: Path, args: Any) -> Report:
    """One run in this process: a copy of the template server, Django set up for it."""
    workdir = private_workdir(f"drill-{fault}-{broker}-")
    server = PrivatePostgres(template.parent, 0).copy(workdir / "pg")
    server.start()
    server.wait_ready()
    try:
        with redis_server(workdir) if broker == "redis" else _nothing() as redis_url:
            os.environ.update(DATABASE_URL=server.url(DATABASE), DJANGO_SETTINGS_MODULE="leadops.settings")
            os.environ.setdefault("SECRET_KEY", SECRET_KEY)
            if broker == "redis":
                os.environ.update(Q_BROKER="redis", REDIS_URL=redis_url)
            import django

            django.setup()
            return Drill(fault, broker, server, workdir, redis_url, args).run()
    finally:
        server.remove()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def _nothing() -> Iterator[str]:
    yield ""


# --- Many runs -------------------------------------------------------------------


def table(reports: list[Report]) -> str:
    lines = [
        f"{'fault':<11}{'broker':<7}{'accepted':>9}{'refused':>8}{'lost':>6}{'dup sends':>10}"
        f"{'stuck w/o item':>15}  {'chain':<8}{'settled':<8}{'seconds':>8}"
    ]
    for r in reports:
        lines.append(
            f"{r.fault:<11}{r.broker:<7}{r.accepted:>9}{r.refused:>8}{r.lost_events:>6}{r.duplicate_sends:>10}"
            f"{r.stuck_without_exception_item:>15}  {'intact' if r.chain_intact else 'BROKEN':<8}"
            f"{'yes' if r.settled else 'no':<8}{r.seconds:>8.0f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_runs = ",".join(f"{f}:{b}" for b in BROKERS for f in FAULTS)
    parser.add_argument("--runs", default=default_runs, help="fault:broker pairs (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=0, help="runs at once (default: all)")
    parser.add_argument("--people", type=int, default=12, help="people in each burst (default %(default)s)")
    parser.add_argument("--slow", type=float, default=2.0, help="the slow provider's seconds per text (kill9)")
    parser.add_argument(
        "--bound",
        type=int,
        default=60,
        help="seconds in flight before a message counts as stuck "
        "(the sweeps' MESSAGE_*_STALE_SECONDS; default %(default)s)",
    )
    parser.add_argument(
        "--grace", type=float, default=45.0, help="seconds past the bound to settle (default %(default)s)"
    )
    parser.add_argument("--seed-from", default="", help="a migrated database to copy instead of migrating (faster)")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON (one list) on stdout")
    parser.add_argument("--keep", action="store_true", help="keep each run's folder (logs) in the temp directory")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # fault:broker:template, run by the parent
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.one:
        fault, broker, template = args.one.split(":", 2)
        report = run_one(fault, broker, Path(template), args)
        print(json.dumps(asdict(report)))
        return 0
    runs = [tuple(pair.split(":")) for pair in args.runs.split(",") if pair]
    for fault, broker in runs:
        if fault not in FAULTS or broker not in BROKERS:
            raise SystemExit(f"unknown run {fault}:{broker} (faults {FAULTS}, brokers {BROKERS})")
    base = private_workdir("drill-template-")
    started = time.monotonic()
    try:
        log("building the template database" + (" from a dump" if args.seed_from else " (migrate)"))
        template = template_build(base, args.seed_from)

        def child(run: tuple[str, ...]) -> Report:
            fault, broker = run
            command = [sys.executable, __file__, *_options(args), "--one", f"{fault}:{broker}:{template.data}"]
            log(f"{fault}:{broker}: started")
            done = subprocess.run(command, capture_output=True, text=True)  # noqa: S603
            sys.stderr.write(done.stderr[-3000:] if done.returncode else "")
            try:
                return Report(**json.loads(done.stdout.strip().splitlines()[-1]))
            except (IndexError, json.JSONDecodeError, TypeError):
                report = Report(fault, broker)
                report.detail.append(f"the run crashed (exit {done.returncode}):\n{done.stderr[-3000:]}")
                return report

        with ThreadPoolExecutor(max_workers=args.jobs or len(runs)) as pool:
            reports = list(pool.map(child, runs))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps([asdict(r) for r in reports]))
    else:
        print(table(reports))
        for r in reports:
            for line in r.detail:
                print(f"  {r.fault}:{r.broker}: {line}")
        print(f"{len(reports)} runs in {time.monotonic() - started:.0f} s")
    return 0 if all(r.clean for r in reports) else 1


def _options(args: argparse.Namespace) -> list[str]:
    return [
        "--people",
        str(args.people),
        "--slow",
        str(args.slow),
        "--bound",
        str(args.bound),
        "--grace",
        str(args.grace),
        *(["--keep"] if args.keep else []),
    ]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
