"""What a database's schema is, read from PostgreSQL's catalogue, to compare
two databases built different ways (by the squashed migration and by the
originals). Names of the objects PostgreSQL or Django named for us are kept
where they are part of what code relies on (constraints and indexes are
found by name), and column order is not compared (a column added later sits
at the end, which no query depends on)."""

from __future__ import annotations

from typing import Any

SCHEMA_QUERIES = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
    """,
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
    """,
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
        WHERE NOT t.tgisinternal
    """,
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'public'
        JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
    """,
    "extensions": "SELECT extname FROM pg_extension",
    "migrations": "SELECT app, name FROM django_migrations",
}


def schema_catalogue(cursor: Any) -> dict[str, set[tuple[object, ...]]]:
    """Each kind of schema object as a set of rows (order-free)."""
    catalogue = {}
    for kind, sql in SCHEMA_QUERIES.items():
        cursor.execute(sql)
        catalogue[kind] = {tuple(row) for row in cursor.fetchall()}
    return catalogue
