"""What a platform module gives the delivery: the request it built (or why
there is nothing to send) and the platform's answer, sorted."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


class Skip(Exception):
    """Nothing to send for this upload; the message says why (kept on the upload)."""


@dataclass
class Built:
    """An upload's request: `payload` is what the page shows (what is, or in
    dry run would be, sent), `request` what the platform's client takes."""

    payload: dict[str, Any]
    request: Any
    value: Decimal | None = None
    currency: str = ""


@dataclass
class Answer:
    """What came back. `outcome`: sent; not_yet (Google has not processed the
    click or the conversion yet: wait within the click's window); retry (a
    passing failure: counts against the upload's tries); failed (refused for
    good: a person looks)."""

    outcome: str
    code: str = ""
    message: str = ""
    response: dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0
    # not_yet for a conversion the platform took and has not judged yet (the
    # Data Manager API's processing): asked about past the click's window,
    # since it went within it.
    processing: bool = False
