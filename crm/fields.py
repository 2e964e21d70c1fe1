"""Secrets at rest: a text field stored as a Fernet token.

The keys come from FIELD_ENCRYPTION_KEYS (MultiFernet: the first encrypts,
every one decrypts), so rotating is: put a new key first, run
`manage.py rotate_field_keys`, then drop the old key. Without keys (DEBUG,
tests) one is derived from SECRET_KEY, and `check --deploy` warns; that key
always decrypts too, so setting keys later needs only the rotation.

An empty value is stored empty, so "not set" stays visible and cheap to ask.
Ciphertext differs on every write: such a field cannot be searched, only
read back.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core import checks
from django.db import models, transaction


class FieldDecryptionError(Exception):
    """A stored secret does not open with any configured key. The message
    never holds the ciphertext or a key."""


def _derived_key(secret_key: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"leadops field encryption")
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


@lru_cache(maxsize=8)
def _multifernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    return MultiFernet([*(Fernet(key) for key in keys), Fernet(_derived_key(secret_key))])


def field_cipher() -> MultiFernet:
    """The cipher for the settings in force (override_settings included)."""
    return _multifernet(tuple(settings.FIELD_ENCRYPTION_KEYS), settings.SECRET_KEY)


def secret_encrypt(value: str) -> str:
    return field_cipher().encrypt(value.encode()).decode() if value else ""


def secret_decrypt(token: str, *, what: str = "a secret") -> str:
    if not token:
        return ""
    try:
        return field_cipher().decrypt(token.encode()).decode()
    except InvalidToken:
        raise FieldDecryptionError(
            f"{what} cannot be decrypted with FIELD_ENCRYPTION_KEYS: keep the old key in the list "
            "until `manage.py rotate_field_keys` has run"
        ) from None


class EncryptedTextField(models.TextField):
    """Plain text in Python, a Fernet token in the database."""

    description = "Text encrypted at rest"
    # Lookups would compare against fresh ciphertext and never match; "not set" is `== ""`.
    allowed_lookups = frozenset({"exact", "isnull"})

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        if value is None:
            return None
        return secret_decrypt(value, what=f"{self.model._meta.db_table}.{self.column}")

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return secret_encrypt(value) if isinstance(value, str) else value

    def get_lookup(self, lookup_name: str) -> Any:
        # None: Django refuses the query ("Unsupported lookup"), and so does the type checker.
        return super().get_lookup(lookup_name) if lookup_name in self.allowed_lookups else None


def encrypted_fields() -> list[tuple[type[models.Model], list[EncryptedTextField]]]:
    """Every model with encrypted fields, and those fields."""
    from django.apps import apps

    found = []
    for model in apps.get_models():
        fields = [f for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
        if fields:
            found.append((model, fields))
    return found


def field_keys_rotate() -> dict[str, int]:
    """Re-encrypt every stored secret with the first FIELD_ENCRYPTION_KEYS key.

    One transaction per model, rows locked while rewritten. Afterwards the
    old keys can be removed from the list. Returns rows rewritten per table;
    safe to run again."""
    rewritten: dict[str, int] = {}
    for model, fields in encrypted_fields():
        names = [f.name for f in fields]
        count = 0
        with transaction.atomic():
            for pk, *values in model._default_manager.select_for_update().values_list("pk", *names).order_by("pk"):
                # Reading decrypted with whichever key fits; writing encrypts with the first.
                model._default_manager.filter(pk=pk).update(**dict(zip(names, values, strict=True)))
                count += 1
        rewritten[model._meta.db_table] = count
    return rewritten


@checks.register(checks.Tags.security, deploy=True)
def check_field_encryption_keys(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if settings.FIELD_ENCRYPTION_KEYS:
        return []
    return [
        checks.Warning(
            "FIELD_ENCRYPTION_KEYS is not set: source secrets and page tokens are encrypted with a key "
            "derived from SECRET_KEY, so changing SECRET_KEY makes them unreadable.",
            hint="Set FIELD_ENCRYPTION_KEYS to a Fernet key (docs/security.md), then run manage.py rotate_field_keys.",
            id="crm.W001",
        )
    ]
