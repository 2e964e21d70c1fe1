"""`manage.py qcluster`: django-q2's task cluster, plus the intake loops.

The default cluster also processes inbound events as they are stored
(agents/capture/processing.py: the event row is the work item, a NOTIFY
wakes the loop): its main process forks INTAKE_PROCESSES intake loops, starts
django-q2's cluster (a sentinel process that forks the workers), then watches
the loops, starting again one that died. So every place that runs the
cluster — `make run`, a systemd unit, the tests' processes, the fault drill —
processes inbound events without a process of its own to remember, and
stopping or killing the cluster's process group stops both.

This command takes django-q2's name on purpose, as Django's staticfiles app
takes `runserver`: the app is listed before django_q in INSTALLED_APPS so
this one is found first. The webhooks cluster (Q_CLUSTER_NAME=
leadops-webhooks) runs no intake loop: it only sends.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from multiprocessing.synchronize import Event
from typing import Any

from django.conf import settings
from django.db import connections
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as ClusterCommand

from agents.capture.processing import POLL_SECONDS, intake_serve

# fork: the loops share the main process's loaded Django, as django-q2's workers do.
FORK = multiprocessing.get_context("fork")


def stop_soon(stop: Event) -> None:
    """Set `stop` from a signal handler. Never in the handler itself: the
    signal interrupts this very thread, usually inside `stop.wait()`, and a
    multiprocessing Event's set() waits for every waiter to wake, this one
    included, which cannot until the handler returns (Ctrl-C hung the
    cluster for good). A thread of its own sets it once the handler is back."""
    threading.Thread(target=stop.set, name="stop", daemon=True).start()


def intake_process(stop: Event) -> None:
    """One intake loop, in a process of its own, until `stop` is set (by the
    main process, or by a signal sent to the whole group)."""

    def stopping(signum: int, frame: Any) -> None:
        stop_soon(stop)

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    try:
        intake_serve(stop.wait)
    finally:
        connections.close_all()


class Command(ClusterCommand):
    help = "Start the task cluster; the default one also processes inbound events as they arrive."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--no-intake", action="store_true", help="run the task cluster only (another host runs the intake loops)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["cluster_name"]:
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        name = os.environ.get("Q_CLUSTER_NAME", settings.Q_CLUSTER["name"])
        intake = not options["no_intake"] and not options["run_once"] and name != settings.WEBHOOKS_CLUSTER
        # Closed before anything forks: a child must never share the
        # parent's database socket.
        connections.close_all()
        cluster = Cluster()
        if not intake:
            cluster.start()
            if options["run_once"]:
                cluster.stop()
            return
        stop = FORK.Event()

        # The cluster's own handler stops the sentinel and its workers; ours
        # also stops the loops.
        def stopping(signum: int, frame: Any) -> None:
            stop_soon(stop)
            cluster.sig_handler(signum, frame)

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        loops = [self._loop_start(stop) for _ in range(settings.INTAKE_PROCESSES)]
        cluster.start()
        while not stop.wait(POLL_SECONDS):
            for n, loop in enumerate(loops):
                if not loop.is_alive():
                    self.stderr.write(f"intake loop {loop.pid} ended ({loop.exitcode}); starting another")
                    loops[n] = self._loop_start(stop)
        for loop in loops:
            loop.join(timeout=POLL_SECONDS * 3)

    def _loop_start(self, stop: Event) -> Any:
        loop = FORK.Process(target=intake_process, args=(stop,), name="intake", daemon=True)
        loop.start()
        return loop
