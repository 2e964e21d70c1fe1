from __future__ import annotations

import os
import random
import time
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.polling import poll_until
from devtools.simulator.core import (
    BUILDER_NAMES,
    DEFAULT_TIMEOUT,
    GRAPH_DEFAULT_PORT,
    LOOPBACK_HOSTS,
    GraphServer,
    SimulationError,
    context_load,
    loopback_url,
    plan_build,
    plan_run,
    summary_lines,
    unexpected,
)
from devtools.simulator.estimates import WAIT_SECONDS
from devtools.simulator.lsa import LSA_PORT, lsa_simulate
from devtools.simulator.marketplace_api import MarketplaceServer
from devtools.simulator.marketplaces import yelp_publish, yelp_published

MARKETPLACE_DEFAULT_PORT = 8768

HELP = f"""Post realistic, correctly signed webhooks for every configured source of a
business to a running server over HTTP: Google Ads leads (some is_test), website
forms (JSON and form-encoded, phones typed every way), hosted-form submissions
(GET for the CSRF cookie, token and nonce, then POST), Typeform responses, Meta
lead ads, Instagram DMs, Twilio missed calls and inbound SMS, Thumbtack
negotiations and messages, Yelp lead notifications (the leads served by a
Yelp API stand-in), Angi lead pushes, CallRail calls and texts, and SMS replies
from earlier leads. Some people use two or three channels minutes apart; some
deliveries are repeated byte for byte; a few are malformed but signed, a few
badly signed: those are counted as meant to fail. Exits non-zero when any
status is unexpected.

Run it with the server's settings (the same environment or .env): it reads the
business's sources from the database (a twilio source's own auth token included), and
META_APP_SECRET, TWILIO_AUTH_TOKEN (for a business on the shared Twilio account) and
PUBLIC_BASE_URL (Twilio signs PUBLIC_BASE_URL + path) from settings. A provider
whose source or secret is missing is skipped, and the reason printed.

Meta lead ads: the server reads each announced lead from META_GRAPH_URL. This
command serves those leads itself, from a Graph-compatible server on
127.0.0.1:--graph-port (default: the port of a loopback META_GRAPH_URL, else
{GRAPH_DEFAULT_PORT}). Start the web server and the task cluster with
META_GRAPH_URL=http://127.0.0.1:<that port>; otherwise Meta leads are stored but
fail to fetch, and stay failed and replayable. The command waits (at most
--graph-wait seconds) for the cluster to fetch them.

Replies are simulated (SMS and Instagram). Calendly bookings, cancellations
and no-shows are posted when the business has a calendly source and the server
can check them (the source's secret or CALENDLY_SIGNING_KEY); Stripe payments
and refunds when STRIPE_WEBHOOK_SECRET is set.

Estimates have no webhook: with a team member's API token (--token, or the
SIMULATE_API_TOKEN environment variable; `make simulate` makes one for the
demo owner) some people get a visit (booked through Calendly, begun hours ago)
that is marked held, an estimate sent, and an acceptance or a decline, all
through the API as a person's tool writes them. Each post waits (at most
--api-wait seconds) for the records it names to appear on the server."""


class Command(BaseCommand):
    help = HELP

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        from argparse import RawDescriptionHelpFormatter

        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = RawDescriptionHelpFormatter
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running server (default %(default)s)")
        parser.add_argument("--leads", type=int, default=20, help="how many people (default %(default)s)")
        parser.add_argument("--business", help="the business slug (default: the only one there is)")
        parser.add_argument("--seed", type=int, help="the same seed posts the same people and ids (default: random)")
        parser.add_argument(
            "--only",
            help=f"comma-separated providers, from: {','.join(BUILDER_NAMES)},google_lsa,calendly,stripe,estimates "
            "(default: every configured one)",
        )
        parser.add_argument(
            "--lsa-port",
            type=int,
            default=LSA_PORT,
            help="the Google Ads API stand-in's port for Local Services leads; its OAuth token endpoint is the next "
            "one (default %(default)s)",
        )
        parser.add_argument(
            "--lsa-wait",
            type=float,
            default=150.0,
            help="seconds to serve Local Services leads until the server's poller (every minute) read them "
            "(default %(default)s)",
        )
        parser.add_argument("--graph-port", type=int, help="the Meta Graph stand-in's port (0: any free port)")
        parser.add_argument("--no-graph", action="store_true", help="do not serve Meta leads (they will fail)")
        parser.add_argument(
            "--graph-wait", type=float, default=30.0, help="seconds to wait for Meta lead reads (default %(default)s)"
        )
        parser.add_argument(
            "--marketplace-port",
            type=int,
            default=MARKETPLACE_DEFAULT_PORT,
            help="the Yelp and Thumbtack API stand-in's port (default %(default)s; the server's YELP_API_URL)",
        )
        parser.add_argument("--concurrency", type=int, default=4, help="sender threads (default %(default)s)")
        parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT[1], help="read timeout, seconds")
        parser.add_argument("--public-base-url", help="the base URL Twilio signatures use (default PUBLIC_BASE_URL)")
        parser.add_argument(
            "--allow-remote", action="store_true", help="allow a --url that is not this machine (fake leads!)"
        )
        parser.add_argument(
            "--token",
            default=os.environ.get("SIMULATE_API_TOKEN", ""),
            help="a team member's API token, for estimates (default: $SIMULATE_API_TOKEN)",
        )
        parser.add_argument(
            "--api-wait",
            type=float,
            default=WAIT_SECONDS,
            help="seconds an estimate post waits for its lead or visit on the server (default %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"].rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise CommandError(f"--url must be an http(s) URL, not {url!r}")
        if not loopback_url(url) and not options["allow_remote"]:
            raise CommandError(f"--url {url} is not {' or '.join(LOOPBACK_HOSTS)}: pass --allow-remote to post there")
        if options["leads"] < 0:
            raise CommandError("--leads must be 0 or more")
        only = [n.strip() for n in options["only"].split(",") if n.strip()] if options["only"] else None
        # Local Services leads are not posted: Google is polled for them, so
        # they are served from a stand-in after the posts (`_lsa`).
        lsa = only is None or "google_lsa" in only
        only = [name for name in only if name != "google_lsa"] if only is not None else None
        seed = options["seed"] if options["seed"] is not None else random.SystemRandom().randrange(1, 1_000_000)
        try:
            ctx = context_load(
                options["business"], public_base_url=options["public_base_url"], api_token=options["token"].strip()
            )
            plan = plan_build(ctx, leads=options["leads"], seed=seed, only=only, api_wait=options["api_wait"])
        except SimulationError as exc:
            raise CommandError(str(exc)) from exc

        out = self.stdout.write
        if only == [] and lsa:  # Local Services alone
            self._lsa(ctx.business_slug, options, seed, asked=True)
            return
        out(f"Simulating {len(plan.people)} people for {ctx.business_slug} against {url} (--seed {seed})")
        for name, reason in plan.skipped.items():
            out(self.style.WARNING(f"  skipped {name}: {reason}"))
        if not plan.builders:
            raise CommandError("nothing to simulate: no configured provider can be posted to")
        if "twilio" in plan.builders:
            out(f"  Twilio signatures are made for {ctx.public_base_url} + path (PUBLIC_BASE_URL)")

        graph = None
        if plan.graph_leads and not options["no_graph"]:
            graph = GraphServer(self._graph_port(options["graph_port"]))
            graph.publish(plan.graph_leads, plan.graph_tokens)
            graph.start()
            out(f"  Meta Graph stand-in on {graph.url}: the server must run with META_GRAPH_URL={graph.url}")
            if urlsplit(settings.META_GRAPH_URL).netloc != urlsplit(graph.url).netloc:
                out(
                    self.style.WARNING(
                        f"  META_GRAPH_URL here is {settings.META_GRAPH_URL}; if the server's is too, its Meta leads "
                        "fail to fetch and stay failed, replayable once META_GRAPH_URL points at a Graph that has them"
                    )
                )
        marketplace = None
        yelp_leads = yelp_published(plan)["leads"]
        if yelp_leads:
            marketplace = MarketplaceServer(options["marketplace_port"])
            yelp_publish(marketplace, plan)
            marketplace.start()
            out(f"  Yelp API stand-in on {marketplace.url}: the server must run with YELP_API_URL={marketplace.url}")
        try:
            started = time.monotonic()
            results = plan_run(
                plan, url, concurrency=options["concurrency"], timeout=(DEFAULT_TIMEOUT[0], options["timeout"])
            )
            out(f"Posted {len(results)} webhooks in {time.monotonic() - started:.1f} s")
            for line in summary_lines(plan, results):
                out(line)
            if graph is not None:
                self._graph_report(graph, plan.graph_leads, options["graph_wait"])
            elif plan.graph_leads:
                out(self.style.WARNING(f"Meta: {len(plan.graph_leads)} leads announced, none served (--no-graph)"))
            if marketplace is not None:
                self._yelp_report(marketplace, list(yelp_leads), options["graph_wait"])
        finally:
            if graph is not None:
                graph.close()
            if marketplace is not None:
                marketplace.close()
        if lsa:
            self._lsa(ctx.business_slug, options, seed, asked=only is not None)
        if "estimates" not in plan.builders and not ctx.api_token:
            out("Estimates: not simulated (no API token: pass --token or set SIMULATE_API_TOKEN)")
        wrong = unexpected(results)
        if wrong:
            raise CommandError(f"{len(wrong)} unexpected status(es), listed above")
        out(self.style.SUCCESS("Every status was the expected one."))

    def _graph_port(self, given: int | None) -> int:
        if given is not None:
            return given
        configured = urlsplit(settings.META_GRAPH_URL)
        if configured.hostname in LOOPBACK_HOSTS and configured.port:
            return configured.port
        return GRAPH_DEFAULT_PORT

    def _lsa(self, slug: str, options: dict[str, Any], seed: int, *, asked: bool) -> None:
        """Serve Local Services leads (a tenth of --leads, at least one) until
        the server's poller read them, when the business has a google_lsa source."""
        from crm.models import Provider, Source

        if not Source.objects.filter(business__slug=slug, provider=Provider.GOOGLE_LSA, is_active=True).exists():
            if asked:
                self.stdout.write(self.style.WARNING("  skipped google_lsa: no active google_lsa source"))
            return
        port = options["lsa_port"]
        self.stdout.write(
            f"Google Local Services: serving leads on 127.0.0.1:{port} until the server's poller reads them "
            f"(it must run with GOOGLE_ADS_ENDPOINT=127.0.0.1:{port}, "
            f"GOOGLE_OAUTH_TOKEN_URL=http://127.0.0.1:{port + 1}/token)"
        )
        leads = max(1, options["leads"] // 10)
        for line in lsa_simulate(
            slug, leads=leads, seed=seed, port=port, token_port=port + 1, timeout=options["lsa_wait"]
        ):
            self.stdout.write(line)

    def _yelp_report(self, server: MarketplaceServer, leads: list[str], wait: float) -> None:
        def read() -> set[str]:
            with server.lock:
                return {lead for lead in leads for r in server.seen if r["path"] == f"/v3/leads/{lead}"}

        poll_until(lambda: len(read()) >= len(leads), timeout=wait)
        line = f"Yelp: {len(read())} of {len(leads)} announced leads read from {server.url}"
        if len(read()) == len(leads):
            self.stdout.write(line)
            return
        self.stdout.write(
            self.style.WARNING(
                f"{line}. The rest were not read within {wait:.0f} s: is the task cluster running, with "
                f"YELP_API_URL={server.url}? Unread notifications fail and stay replayable."
            )
        )

    def _graph_report(self, graph: GraphServer, leads: dict[str, Any], wait: float) -> None:
        fetched = graph.wait_fetched(leads, timeout=wait)
        line = f"Meta: {len(fetched)} of {len(leads)} announced leads fetched from {graph.url}"
        if graph.refused:
            line += f"; {graph.refused} Graph reads refused (unknown id or wrong access token)"
        if len(fetched) == len(leads):
            self.stdout.write(line)
            return
        self.stdout.write(
            self.style.WARNING(
                f"{line}. The rest were not fetched within {wait:.0f} s: is the task cluster running, with "
                f"META_GRAPH_URL={graph.url}? Unfetched leads fail and stay replayable."
            )
        )
