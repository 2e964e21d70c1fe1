"""Receipt checkpoints, exported outside the database, signed and chained.

A hash chain shows an edit, a reordering or a removal in its middle, but not
that its newest receipts were cut off, nor a chain rewritten from some point
on by someone who can also disable the triggers. A checkpoint (each
business's sealed head: seq and hash) kept where the database's users cannot
reach it settles both: `verify_receipts --checkpoint FILE` checks that the
receipt at that seq still has that hash. The operator chooses where it goes
(`RECEIPT_CHECKPOINT_TO`): a file (say on another host's mount), an email
address, or a URL that receives a JSON POST; the hourly job and the
`export_receipt_checkpoint` command send it.

A checkpoint file is itself something to trust. So each line is signed with
an Ed25519 key that lives in the environment (`RECEIPT_CHECKPOINT_KEY`),
never in the database, and names the digest of its business's previous line
(`prev`). Whoever can rewrite the database and the file but not read the
key cannot add a line the verifier accepts, and cannot drop or re-base one in
the middle: `checkpoints_read` refuses a bad signature or a broken link
wherever it is, whatever the last line says. The exporter remembers each
line it sent (`ReceiptCheckpoint`), so the next one chains to it; a line sent
nowhere (printed by the command) is signed but not remembered.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any

import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.utils import timezone

from crm.models import Business, ReceiptCheckpoint
from crm.services.receipts import Checkpoint, receipt_checkpoints, receipts_seal

HTTP_TIMEOUT_SECONDS = 10


# One exporter at a time: two would both chain to the same previous line.
_EXPORT_LOCK = 0x6C6F_636B  # pg_advisory_xact_lock key ("lock")


class CheckpointExportError(Exception):
    """No key to sign with, or the destination refused the checkpoint or cannot be reached."""


def new_key_pair() -> tuple[str, str]:
    """A fresh Ed25519 key: (private, public), each base64 of its 32 bytes."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(private).decode(), base64.b64encode(public).decode()


def signing_key() -> Ed25519PrivateKey:
    raw = settings.RECEIPT_CHECKPOINT_KEY
    if not raw:
        raise CheckpointExportError(
            "no RECEIPT_CHECKPOINT_KEY to sign checkpoints with: `manage.py export_receipt_checkpoint --new-key` "
            "makes one; keep it outside the database"
        )
    try:
        return Ed25519PrivateKey.from_private_bytes(base64.b64decode(raw, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise CheckpointExportError("RECEIPT_CHECKPOINT_KEY is not the base64 of a 32-byte Ed25519 key") from exc


def verifying_key(public: str = "") -> Ed25519PublicKey:
    """The public key checkpoints must be signed by: `public` (base64), else
    RECEIPT_CHECKPOINT_PUBLIC_KEY, else the half of RECEIPT_CHECKPOINT_KEY.
    ValueError when there is none."""
    raw = public or settings.RECEIPT_CHECKPOINT_PUBLIC_KEY
    if raw:
        try:
            return Ed25519PublicKey.from_public_bytes(base64.b64decode(raw, validate=True))
        except (ValueError, binascii.Error) as exc:
            raise ValueError("the public key is not the base64 of a 32-byte Ed25519 key") from exc
    if settings.RECEIPT_CHECKPOINT_KEY:
        try:
            return signing_key().public_key()
        except CheckpointExportError as exc:
            raise ValueError(str(exc)) from exc
    raise ValueError("no key to check the signatures with: give --public-key or set RECEIPT_CHECKPOINT_PUBLIC_KEY")


SIGNED = ("business", "seq", "hash", "exported_at", "prev")


def _canonical(item: dict[str, Any]) -> bytes:
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def line_digest(line: dict[str, Any]) -> str:
    """What the business's next line names as `prev`: sha256 of this signed line."""
    return hashlib.sha256(_canonical({k: line[k] for k in (*SIGNED, "sig")})).hexdigest()


def checkpoints_export(destination: str | None, *, stdout: IO[str] | Any = None) -> list[Checkpoint]:
    """Seal what waits, then sign each business's head, chained to the line
    sent before it, and send the lines to `destination` (None: write them to
    `stdout`, remembered nowhere). A line is remembered only once its
    destination took it. Returns what was exported."""
    key = signing_key()
    receipts_seal()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_EXPORT_LOCK])
        checkpoints = receipt_checkpoints()
        exported_at = timezone.now().isoformat()
        ids = dict(Business.objects.filter(slug__in=[c.business for c in checkpoints]).values_list("slug", "pk"))
        signed = []
        for checkpoint in checkpoints:
            last = ReceiptCheckpoint.objects.filter(business_id=ids[checkpoint.business]).order_by("-id").first()
            item = {**checkpoint.as_dict(), "exported_at": exported_at, "prev": last.digest if last else ""}
            item["sig"] = base64.b64encode(key.sign(_canonical(item))).decode()
            signed.append(item)
            if destination:
                ReceiptCheckpoint.objects.create(
                    business_id=ids[checkpoint.business],
                    seq=checkpoint.seq,
                    hash=checkpoint.hash,
                    exported_at=timezone.now(),
                    prev=item["prev"],
                    signature=item["sig"],
                    digest=line_digest(item),
                )
        lines = "".join(json.dumps(item) + "\n" for item in signed)
        _send(destination, lines, stdout, exported_at)
    return checkpoints


def _send(destination: str | None, lines: str, stdout: IO[str] | Any, exported_at: str) -> None:
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


def _append(path: Path, lines: str) -> None:
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())
    except OSError as exc:
        raise CheckpointExportError(f"cannot write the checkpoint to {path}: {exc}") from exc


def checkpoints_read(path: str, public_key: Ed25519PublicKey) -> list[Checkpoint]:
    """The newest checkpoint of each business in an exported file, once
    every line is signed by `public_key` and follows its business's
    previous line. ValueError naming the first line that is not a
    checkpoint, is not signed by the key, or breaks its business's chain
    (a line dropped, reordered or re-based)."""
    newest: dict[str, tuple[int, dict[str, Any]]] = {}
    for number, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            item = json.loads(text)
            signed = {k: item[k] for k in SIGNED}
            signature = base64.b64decode(str(item["sig"]), validate=True)
            int(item["seq"])
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise ValueError(f"line {number} of {path} is not a checkpoint") from exc
        try:
            public_key.verify(signature, _canonical(signed))
        except InvalidSignature:
            raise ValueError(
                f"line {number} of {path} is not signed by the checkpoint key: it was written or changed by "
                "someone else"
            ) from None
        before = newest.get(str(item["business"]))
        if before is not None and item["prev"] != line_digest(before[1]):
            raise ValueError(
                f"line {number} of {path} does not follow business {item['business']}'s checkpoint on line "
                f"{before[0]}: the chain of checkpoints was cut, reordered or re-based"
            )
        newest[str(item["business"])] = (number, item)
    return [Checkpoint(str(i["business"]), int(i["seq"]), str(i["hash"])) for _, i in newest.values()]


def checkpoint_export_scheduled() -> int:
    """The hourly job: export to RECEIPT_CHECKPOINT_TO when it is set."""
    if not settings.RECEIPT_CHECKPOINT_TO:
        return 0
    return len(checkpoints_export(settings.RECEIPT_CHECKPOINT_TO))
