"""Without a mail server, a message leaves a line in the log that it was not
sent, and nothing of what it said."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.mail import EmailMessage, get_connection

ROOT = Path(__file__).resolve().parents[2]


def test_an_unsent_message_logs_neither_its_words_nor_its_recipients(caplog: pytest.LogCaptureFixture) -> None:
    message = EmailMessage(
        subject="SLA breached: Rosa Diaz",
        body="Rosa Diaz (+13125550121) wrote: my basement is flooding",
        to=["rosa.diaz@example.com"],
    )
    with caplog.at_level(logging.WARNING, logger="leadops.mail"):
        sent = get_connection("leadops.mail.UnsentMailBackend").send_messages([message])
    assert sent == 1
    logged = caplog.text
    assert "mail not sent" in logged
    for secret in ("Rosa", "Diaz", "13125550121", "flooding", "rosa.diaz@example.com"):
        assert secret not in logged


def test_a_server_without_email_url_uses_it_instead_of_the_console() -> None:
    env = {k: v for k, v in os.environ.items() if k != "EMAIL_URL"}
    env.update(DJANGO_SETTINGS_MODULE="leadops.settings", SECRET_KEY="x" * 50)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.EMAIL_BACKEND)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "leadops.mail.UnsentMailBackend"
