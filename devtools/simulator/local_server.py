"""A provider stand-in's HTTP server on 127.0.0.1, answered from a thread:
what every stand-in class (Jobber's, the OAuth calendars', Housecall Pro's)
does to listen, start and stop."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalServer:
    httpd: ThreadingHTTPServer
    url: str
    thread: threading.Thread

    def serve(self, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        """Listen on `port` (0: any free one) with `handler`; `start` answers."""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
