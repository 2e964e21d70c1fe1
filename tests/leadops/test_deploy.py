"""Going live: the documented production environment passes Django's deploy
checks, and a server without SECRET_KEY refuses to start.

Each test starts `manage.py` in a fresh process with only the environment it
names (the settings are read once, at import)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]
# Settings are read at import, and `check` never connects: nothing listens here.
UNREACHABLE_DB = "postgres://leadops:x@127.0.0.1:9/leadops"


def documented_production_env() -> dict[str, str]:
    """The `sh` block of the Going live checklist, placeholders filled in."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("## Going live") :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "docs/operations.md: Going live has no ```sh environment block"
    env = {}
    for line in block.group(1).splitlines():
        name, _, value = line.strip().partition("=")
        if not name:
            continue
        if name == "SECRET_KEY":
            value = secrets.token_urlsafe(50)
        elif name == "FIELD_ENCRYPTION_KEYS":
            value = Fernet.generate_key().decode()
        elif name == "DATABASE_URL":
            value = UNREACHABLE_DB
        else:
            value = re.sub(r"<[^>]*>", "placeholder", value)
        env[name] = value
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(ROOT)),
        "DJANGO_SETTINGS_MODULE": "leadops.settings",
        # Set, even empty, so a developer's .env cannot fill them in.
        "SECRET_KEY": "",
        "DEBUG": "",
        "FIELD_ENCRYPTION_KEYS": "",
        "DATABASE_URL": UNREACHABLE_DB,
        # Where compiled modules go (the Makefile keeps them under .venv), so
        # these processes neither compile everything again nor leave
        # __pycache__ beside the sources.
        **{name: os.environ[name] for name in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE") if name in os.environ},
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_passes_with_the_documented_production_environment() -> None:
    env = documented_production_env()
    assert {"SECRET_KEY", "FIELD_ENCRYPTION_KEYS", "PUBLIC_BASE_URL", "SECURE_PROXY_SSL_HEADER"} <= env.keys()

    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_when_the_field_encryption_keys_are_not_set() -> None:
    env = {**documented_production_env(), "FIELD_ENCRYPTION_KEYS": ""}

    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode != 0
    assert "crm.W001" in result.stderr and "FIELD_ENCRYPTION_KEYS is not set" in result.stderr


def test_with_debug_off_and_no_secret_key_the_server_refuses_to_start() -> None:
    env = {**documented_production_env(), "SECRET_KEY": ""}

    result = manage("check", env=env)

    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY must be set when DEBUG is off" in result.stderr
    # Not the key that used to be filled in silently: it is public in the repository.
    assert "dev-only-insecure-key" not in result.stdout + result.stderr


def test_debug_still_starts_without_a_secret_key_for_local_work() -> None:
    result = manage("check", env={"DEBUG": "true"})

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("FIELD_ENCRYPTION_KEYS", "not-a-fernet-key", "FIELD_ENCRYPTION_KEYS entry 1 is not a Fernet key"),
        ("CSRF_TRUSTED_ORIGINS", "leads.example.com", "CSRF_TRUSTED_ORIGINS entries need a scheme"),
        ("TRUSTED_PROXY_COUNT", "-1", "TRUSTED_PROXY_COUNT must be 0 or more"),
    ],
)
def test_a_bad_security_setting_stops_the_start_with_its_name(name: str, value: str, message: str) -> None:
    result = manage("check", env={**documented_production_env(), name: value})

    assert result.returncode != 0
    assert message in result.stderr
    if name == "FIELD_ENCRYPTION_KEYS":
        assert value not in result.stderr, "a key, even a broken one, is never printed"
