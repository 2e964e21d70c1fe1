"""Receipt checkpoints, exported outside the database.

A hash chain shows an edit, a reordering or a removal in its middle, but not
that its newest receipts were cut off, nor a chain rewritten from some point
on by someone who can also disable the triggers. A checkpoint (each
business's sealed head: seq and hash) kept where the database's users cannot
reach it settles both: `verify_receipts --checkpoint FILE` checks that the
receipt at that seq still has that hash. The operator chooses where it goes
(`RECEIPT_CHECKPOINT_TO`): a file (say on another host's mount), an email
address, or a URL that receives a JSON POST; the hourly job and the
`export_receipt_checkpoint` command send it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from crm.services.receipts import Checkpoint, receipt_checkpoints, receipts_seal

HTTP_TIMEOUT_SECONDS = 10


class CheckpointExportError(Exception):
    """The destination refused the checkpoint, or cannot be reached."""


def checkpoints_export(destination: str | None, *, stdout: IO[str] | Any = None) -> list[Checkpoint]:
    """Seal what waits, then send each business's head to `destination`
    (None: write the lines to `stdout`). Returns what was exported."""
    receipts_seal()
    checkpoints = receipt_checkpoints()
    exported_at = timezone.now().isoformat()
    lines = "".join(json.dumps({**c.as_dict(), "exported_at": exported_at}) + "\n" for c in checkpoints)
    if not destination:
        if stdout is not None:
            stdout.write(lines)
    elif destination.startswith("mailto:"):
        send_mail(
            subject=f"LeadOps receipt checkpoint {exported_at}",
            message="Keep this: `verify_receipts --checkpoint FILE` checks the chains against it.\n\n" + lines,
            from_email=None,
            recipient_list=[destination.removeprefix("mailto:")],
        )
    elif destination.startswith(("https://", "http://")):
        try:
            response = requests.post(
                destination,
                data=lines.encode(),
                headers={"Content-Type": "application/jsonl"},
                timeout=HTTP_TIMEOUT_SECONDS,
            )
            response.raise_for_status()
        except requests.RequestException as exc:
            raise CheckpointExportError(f"checkpoint POST to {destination} failed: {exc}") from exc
    else:
        _append(Path(destination.removeprefix("file:")), lines)
    return checkpoints


def _append(path: Path, lines: str) -> None:
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())
    except OSError as exc:
        raise CheckpointExportError(f"cannot write the checkpoint to {path}: {exc}") from exc


def checkpoints_read(path: str) -> list[Checkpoint]:
    """The newest checkpoint of each business in an exported file (the
    last line of each wins). ValueError on a line that is not one."""
    newest: dict[str, Checkpoint] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            checkpoint = Checkpoint(str(item["business"]), int(item["seq"]), str(item["hash"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number} of {path} is not a checkpoint") from exc
        newest[checkpoint.business] = checkpoint
    return list(newest.values())


def checkpoint_export_scheduled() -> int:
    """The hourly job: export to RECEIPT_CHECKPOINT_TO when it is set."""
    if not settings.RECEIPT_CHECKPOINT_TO:
        return 0
    return len(checkpoints_export(settings.RECEIPT_CHECKPOINT_TO))
