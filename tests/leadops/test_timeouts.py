"""Every client that talks to another server has a deadline: mail too."""

from __future__ import annotations

import socket
import threading
import time

from django.core.mail import get_connection


def test_the_smtp_connection_gives_up_on_a_server_that_never_answers(settings):
    # A real local server that accepts the connection and never greets.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    settings.EMAIL_TIMEOUT = 1
    connection = get_connection(
        "django.core.mail.backends.smtp.EmailBackend",
        host="127.0.0.1",
        port=server.getsockname()[1],
        fail_silently=False,
    )
    assert connection.timeout == 1
    started = time.monotonic()
    try:
        connection.open()
    except (TimeoutError, OSError):
        pass
    else:  # pragma: no cover - a server that never greets cannot be talked to
        raise AssertionError("the connection opened against a silent server")
    finally:
        server.close()
        for sock in accepted:
            sock.close()
    assert time.monotonic() - started < 10


def test_the_default_mail_timeout_is_set():
    from django.conf import settings

    assert settings.EMAIL_TIMEOUT == 10
