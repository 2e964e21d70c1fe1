"""Opaque, prefixed, immutable public IDs (`lead_01JD…`).

The body is a ULID (48-bit millisecond time + 80 random bits, Crockford
base32), so IDs sort roughly by creation and never reveal row counts.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from django.db import models

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_public_id(prefix: str) -> str:
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        value, index = divmod(value, 32)
        chars.append(_ALPHABET[index])
    return f"{prefix}_{''.join(reversed(chars))}"


class PublicIdField(models.CharField):
    """A unique, non-editable ID generated when the instance is built.

    A database trigger (see crm migration 0002) refuses to change it later.
    """

    def __init__(self, *args: Any, prefix: str = "", **kwargs: Any) -> None:
        self.prefix = prefix
        kwargs.setdefault("max_length", 40)
        kwargs.setdefault("unique", True)
        kwargs.setdefault("editable", False)
        kwargs.setdefault("verbose_name", "ID")
        super().__init__(*args, **kwargs)

    def has_default(self) -> bool:
        return True

    def get_default(self) -> str:
        return new_public_id(self.prefix)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["prefix"] = self.prefix
        for key in ("max_length", "unique", "editable", "verbose_name"):
            kwargs.pop(key, None)
        return name, path, args, kwargs
