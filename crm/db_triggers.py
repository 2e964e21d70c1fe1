"""SQL for the database-level guards that the ORM alone cannot promise.

Used by migrations; kept here so the SQL has one definition.
"""

from __future__ import annotations

PUBLIC_ID_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_public_id_immutable() RETURNS trigger AS $$
BEGIN
    IF NEW.public_id IS DISTINCT FROM OLD.public_id THEN
        RAISE EXCEPTION 'public_id of % is immutable', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
"""

APPEND_ONLY_FUNCTION = """
CREATE OR REPLACE FUNCTION leadops_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""


def public_id_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_public_id_immutable BEFORE UPDATE OF public_id ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION leadops_public_id_immutable();"
    )


def public_id_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_public_id_immutable ON {table};"


# Row-level UPDATE and DELETE: TRUNCATE stays possible for an operator wiping a
# database on purpose (and for test flushes), which is not a change of history.
def append_only_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION leadops_append_only();"
    )


def append_only_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};"
