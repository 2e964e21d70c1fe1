"""Posting one webhook to a receiver: the one way LeadOps posts to a URL a
tenant gave it (outbound webhooks, the business's Slack channel). Below the
roles that use it (agents/webhooks, agents/notify), importing none of them.

The URL's host is resolved and every address checked at each post
(crm.services.webhook_targets), and the connection goes to the address
that was checked — never to whatever a second lookup would return, which
is how DNS rebinding slips a private address past a check. TLS is still
verified for the URL's host name (SNI and the certificate's name), against
the public CAs or WEBHOOK_CA_BUNDLE. No redirect is followed (a 3xx is an
answer, and not a success); every post has explicit connect, read and total
timeouts, and at most a little of the answer is read.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import certifi
import urllib3
from django.conf import settings

from crm.services.webhook_targets import Target, TargetRefused, target_check

# Connect, then each read, then the whole request: a receiver that trickles
# its answer is cut off at the total.
TIMEOUT = urllib3.Timeout(connect=3.05, read=10.0, total=15.0)
EXCERPT_CHARS = 1000
# Read at most this much of an answer; a longer one is cut and its connection closed.
READ_LIMIT = 64 * 1024
USER_AGENT = "LeadOps-Webhooks/1.0"
POOLS_KEPT = 64


@dataclass(frozen=True)
class Answer:
    status_code: int | None  # None: no answer (refused, timed out, connection failed)
    excerpt: str
    error: str
    refused: bool  # the target failed its address check: nothing was sent
    duration_ms: int

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


_pools: OrderedDict[tuple[str, str, int, str, str], urllib3.HTTPConnectionPool] = OrderedDict()
_pools_lock = threading.Lock()


def _pool(target: Target, address: str) -> urllib3.HTTPConnectionPool:
    """A keep-alive pool to one checked address, per process; keyed by that
    address, so a name that now resolves elsewhere never reuses it."""
    ca = settings.WEBHOOK_CA_BUNDLE or certifi.where()
    key = (target.scheme, address, target.port, target.host, ca)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is not None:
            _pools.move_to_end(key)
            return pool
        if target.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                address,
                target.port,
                maxsize=2,
                cert_reqs="CERT_REQUIRED",
                ca_certs=ca,
                server_hostname=target.host,
                assert_hostname=target.host,
            )
        else:
            pool = urllib3.HTTPConnectionPool(address, target.port, maxsize=2)
        _pools[key] = pool
        while len(_pools) > POOLS_KEPT:
            _pools.popitem(last=False)[1].close()
        return pool


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def webhook_post(url: str, body: bytes, headers: dict[str, str]) -> Answer:
    """POST `body` to `url` once; never raises for the network's sake."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        target = target_check(url)
    except TargetRefused as exc:
        return Answer(None, "", str(exc)[:300], refused=True, duration_ms=took())
    response, failure = None, "no address"
    for address in target.addresses:
        try:
            response = _pool(target, address).urlopen(
                "POST",
                target.path,
                body=body,
                headers={**headers, "Host": _host_header(target), "User-Agent": USER_AGENT},
                redirect=False,
                retries=False,
                timeout=TIMEOUT,
                preload_content=False,
                assert_same_host=False,
            )
            break
        except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError) as exc:
            # Not connected, so nothing was sent: the host's next checked
            # address (IPv4 after an unreachable IPv6, say) may answer.
            failure = f"{type(exc).__name__}: {exc}"
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return Answer(None, "", f"{type(exc).__name__}: {exc}"[:300], refused=False, duration_ms=took())
    if response is None:
        return Answer(None, "", failure[:300], refused=False, duration_ms=took())
    read, complete, error = bytearray(), False, ""
    try:
        for chunk in response.stream(8192):
            read += chunk
            if len(read) > READ_LIMIT:
                break
        complete = len(read) <= READ_LIMIT
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        # The answer's status came; its body did not (whole): the status still decides.
        error = f"{type(exc).__name__} while reading the answer: {exc}"[:300]
    finally:
        if not complete:
            response.close()  # the rest is never read: the connection cannot be reused
        response.release_conn()
    excerpt = bytes(read[: EXCERPT_CHARS * 4]).decode("utf-8", errors="replace")[:EXCERPT_CHARS]
    return Answer(response.status, excerpt, error, refused=False, duration_ms=took())
