"""The mail backend of a server with no mail configured (`EMAIL_URL` unset):
it says in the log that a message was not sent, and nothing of what it said.

Django's console backend prints every message whole, and the cluster's log
then holds people's names, numbers and words (a notice, the daily brief,
a technician's brief) where erasing a person cannot reach them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.message import EmailMessage

logger = logging.getLogger("leadops.mail")


class UnsentMailBackend(BaseEmailBackend):
    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        for message in email_messages:
            logger.warning(
                "mail not sent (no EMAIL_URL): one message to %d recipient(s), %d characters",
                len(message.recipients()),
                len(message.body or ""),
            )
        return len(email_messages)
