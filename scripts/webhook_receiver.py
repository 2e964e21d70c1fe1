"""A real local receiver of outbound webhooks, for the tests and the
benchmark: an HTTPS server (threads) with a certificate for `localhost` and
127.0.0.1 from a CA of its own, which verifies every post with the
`standardwebhooks` package, the way an agency's receiver would.

    with Receiver(secret) as receiver:      # https://localhost:<port>/hook
        ...                                 # settings: WEBHOOK_CA_BUNDLE=tls_files().ca,
        receiver.received                   # WEBHOOK_ALLOW_PRIVATE=true (it is loopback)

`answer` decides each post's status (default 200); `delay` makes it slow;
`hold` (a threading.Event) keeps every answer back until it is set.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class TlsFiles:
    ca: str  # the CA certificate a client trusts (WEBHOOK_CA_BUNDLE)
    cert: str
    key: str


@cache
def tls_files() -> TlsFiles:
    """A throwaway CA and a server certificate for localhost and 127.0.0.1, once per process."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "LeadOps test receivers CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="leadops-receivers-"))
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "cert.pem").write_bytes(cert.public_bytes(pem))
    (folder / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return TlsFiles(str(folder / "ca.pem"), str(folder / "cert.pem"), str(folder / "key.pem"))


@dataclass(frozen=True)
class Received:
    webhook_id: str
    verified: bool
    error: str
    body: dict[str, Any]
    status: int  # what the receiver answered
    at: float  # time.monotonic() when it arrived

    @property
    def type(self) -> str:
        return str(self.body.get("type", ""))

    @property
    def lead(self) -> str | None:
        data = self.body.get("data") or {}
        return data.get("lead") if isinstance(data, dict) else None


@dataclass
class Receiver:
    secret: str
    answer: Callable[[Received], int] = lambda received: 200
    delay: float = 0.0
    hold: threading.Event | None = None
    path: str = "/hook"
    port: int = 0  # 0: any free one
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.arrived = threading.Event()  # set at every post

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"https://localhost:{self._server.server_address[1]}{self.path}"

    def accepted(self) -> list[Received]:
        """The posts answered 2xx, in arrival order."""
        with self._lock:
            return [r for r in self.received if 200 <= r.status < 300]

    def __enter__(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle's algorithm the body
            # would wait for the sender's delayed ACK (40 ms a post), as no
            # production server lets it.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    parsed = Webhook(receiver.secret).verify(body, headers)
                    verified, error = True, ""
                except WebhookVerificationError as exc:
                    parsed, verified, error = json.loads(body or b"{}"), False, str(exc)
                arrived = Received(headers.get("webhook-id", ""), verified, error, parsed, 0, time.monotonic())
                status = receiver.answer(arrived) if verified else 401
                with receiver._lock:
                    receiver.received.append(Received(arrived.webhook_id, verified, error, parsed, status, arrived.at))
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(timeout=120)
                if receiver.delay:
                    time.sleep(receiver.delay)
                reply = b"ok" if 200 <= status < 300 else b"not now"
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:  # the sender gave up (its timeout) or went away
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read `received`."""

        files = tls_files()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(files.cert, files.key)
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        # The handshake happens in the request's thread, not in the accepting one.
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hold is not None:
            self.hold.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def closed_port() -> int:
    """A local port nothing listens on (a receiver that is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
