"""The models and their migrations say the same: a constraint changed in a
model without its migration would hold in tests (built from the models'
migrations, so not at all) and never in production."""

from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration(capsys):
    try:
        call_command("makemigrations", "--check", "--dry-run", verbosity=1)
    except SystemExit as exc:
        pytest.fail(f"a model change has no migration:\n{capsys.readouterr().out}\n(exit {exc.code})")
