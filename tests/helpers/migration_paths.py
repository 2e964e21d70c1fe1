"""crm's migrations the way an install that predates their squash runs them.

A new database is built by `crm.0001_squashed_0054_plural_names`; a database
with any of the migrations it replaces goes on through the originals. Tests
that step back to an earlier migration (to put old-shaped data in) need the
originals, which Django's own loader hides once all of them are applied.

    python -m tests.helpers.migration_paths  # migrates settings' database by the originals
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader


def originals_executor(connection: BaseDatabaseWrapper) -> MigrationExecutor:
    """An executor whose graph holds the original migrations, not the squash."""
    executor = MigrationExecutor(connection)
    loader = MigrationLoader(connection, replace_migrations=False)
    for key, migration in loader.replacements.items():
        loader.graph.remove_replacement_node(key, migration.replaces)
        loader.applied_migrations.pop(key, None)
    executor.loader = loader
    return executor


def migrate_by_originals(connection: BaseDatabaseWrapper, targets: list[tuple[str, str]] | None = None) -> None:
    """Migrate to `targets` (every app's latest when None) by the originals."""
    executor = originals_executor(connection)
    executor.migrate(targets if targets is not None else executor.loader.graph.leaf_nodes())


if __name__ == "__main__":
    import django

    django.setup()
    from django.db import connection

    migrate_by_originals(connection)
