"""What a spend pull's platform readers share: the refusal they raise."""

from __future__ import annotations

# SpendRefused kinds: the platform refused the account's token (a person must
# connect it again); the account bills in another currency than the
# business's (never converted); "": a passing failure, tried at the next run.
TOKEN = "token"  # noqa: S105 - a kind of refusal, not a credential
CURRENCY = "currency"


class SpendRefused(Exception):
    """The platform gave no spend for the account; `kind` says whose move it is."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
