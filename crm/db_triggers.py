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


# Row-level UPDATE and DELETE; TRUNCATE of the receipts is refused by its own
# statement-level trigger below.
def append_only_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION leadops_append_only();"
    )


def append_only_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};"


# TRUNCATE fires no row trigger, so a bare `TRUNCATE crm_receipt` would remove a
# whole chain unseen. Refused unless the session says it is wiping the whole
# database on purpose: `manage.py flush` (crm's override) sets this, as do test
# flushes through it. Anyone who can set it could also disable the trigger:
# it stops mistakes and application SQL, the hash chain finds the rest.
TRUNCATE_ALLOWED_SETTING = "leadops.wiping_database"

NO_TRUNCATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION leadops_no_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('{TRUNCATE_ALLOWED_SETTING}', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION '% is append-only: TRUNCATE refused', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""


def no_truncate_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION leadops_no_truncate();"
    )


def no_truncate_trigger_drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};"


# The consent ledger stays append-only but for one change: forgetting a person
# replaces an event's evidence (IP, user agent, the text shown) with this
# marker, and nothing else in the row may change with it.
EVIDENCE_ERASED = '{"erased": true}'

CONSENT_LEDGER_FUNCTION = f"""
CREATE OR REPLACE FUNCTION leadops_consent_ledger() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.evidence = '{EVIDENCE_ERASED}'::jsonb
        AND (to_jsonb(NEW) - 'evidence') = (to_jsonb(OLD) - 'evidence') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$ LANGUAGE plpgsql;
"""

CONSENT_LEDGER_TRIGGER = (
    "CREATE TRIGGER crm_consentevent_append_only BEFORE UPDATE OR DELETE ON crm_consentevent "
    "FOR EACH ROW EXECUTE FUNCTION leadops_consent_ledger();"
)
