"""Real HTTP servers for recorded calls: Twilio's recording media
(`GET /2010-04-01/Accounts/{sid}/Recordings/{sid}.mp3`, HTTP Basic with the
account's SID and auth token) and a speech to text speaking OpenAI's
`POST /v1/audio/transcriptions` (multipart: `file`, `model`,
`response_format`). The official `openai` SDK and `requests` talk to them;
nothing of ours is replaced.

The speech server answers each request per `plan` (in order), then per
`default`: a string is the transcript, an int an error status in OpenAI's
shape, "stall" no answer within the client's timeout. Every request is kept
in `seen` (path, headers, the multipart fields).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers.llm import json_answer

AUDIO = b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(range(256)) * 16  # an mp3's header and some frames


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.seen: list[dict[str, Any]] = []

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def _quiet(self: BaseHTTPRequestHandler, format: str, *args: Any) -> None:
    return


class RecordingServer(_Server):
    """Twilio's API host, serving each recording's audio to its account only."""

    def __init__(self, account_sid: str, auth_token: str, audio: bytes = AUDIO) -> None:
        server = self
        self.audio = audio
        self.status = 200
        expected = "Basic " + base64.b64encode(f"{account_sid}:{auth_token}".encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            log_message = _quiet

            def do_GET(self) -> None:
                with server.lock:
                    server.seen.append({"path": self.path, "authorization": self.headers.get("Authorization", "")})
                if self.headers.get("Authorization") != expected:
                    self._send(401, b'{"code": 20003, "message": "Authenticate"}', "application/json")
                elif server.status != 200 or not self.path.endswith(".mp3") or "/Recordings/RE" not in self.path:
                    self._send(server.status if server.status != 200 else 404, b"{}", "application/json")
                else:
                    self._send(200, server.audio, "audio/mpeg")

            def _send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)

    def recording_url(self, account_sid: str, recording_sid: str) -> str:
        """The RecordingUrl Twilio's callback names (no extension)."""
        return f"{self.url}/2010-04-01/Accounts/{account_sid}/Recordings/{recording_sid}"


class SpeechServer(_Server):
    """A speech to text speaking OpenAI's audio transcriptions."""

    def __init__(self) -> None:
        server = self
        self.plan: list[str | int] = []
        self.default: str | int = "Thanks for calling."

        class Handler(BaseHTTPRequestHandler):
            log_message = _quiet

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                fields = _multipart(self.headers.get("Content-Type", ""), body)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server.lock:
                    server.seen.append({"path": self.path, "headers": headers, "fields": fields})
                    behaviour = server.plan.pop(0) if server.plan else server.default
                if self.path != "/v1/audio/transcriptions" or "file" not in fields or "model" not in fields:
                    self._answer(400, {"error": {"message": "bad request", "type": "invalid_request_error"}})
                elif behaviour == "stall":
                    server.release.wait(10)  # the client gave up long before
                elif isinstance(behaviour, int):
                    kind = "rate_limit_exceeded" if behaviour == 429 else "server_error"
                    self._answer(behaviour, {"error": {"message": f"synthetic {behaviour}", "type": kind}})
                else:
                    self._answer(200, {"text": behaviour, "usage": {"type": "duration", "seconds": 187}})

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                json_answer(self, status, payload)

        super().__init__(Handler)

    def posts(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.seen)


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    if not content_type.startswith("multipart/form-data"):
        return {}
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str):
            fields[name] = payload if isinstance(payload, bytes) else b""
    return fields


@contextmanager
def speech_server(settings: Any, *, model: str = "whisper-test") -> Iterator[SpeechServer]:
    """A started speech to text with the STT_* settings pointing at it: one
    attempt, a 0.5 s read timeout (a stalled answer gives up quickly)."""
    server = SpeechServer()
    server.start()
    settings.STT_BASE_URL = f"{server.url}/v1"
    settings.STT_API_KEY = "stt-test-key-not-secret"
    settings.STT_MODEL = model
    settings.STT_TIMEOUT_SECONDS = 0.5
    settings.STT_MAX_RETRIES = 0
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def recording_server(settings: Any, account_sid: str, auth_token: str) -> Iterator[RecordingServer]:
    """A started Twilio media host, TWILIO_API_BASE_URL pointing at it."""
    server = RecordingServer(account_sid, auth_token)
    server.start()
    settings.TWILIO_API_BASE_URL = server.url
    settings.TWILIO_ACCOUNT_SID = account_sid
    try:
        yield server
    finally:
        server.stop()
