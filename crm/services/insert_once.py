"""Inserting a row once per unique key, in one round trip.

`get_or_create` (or a create caught with IntegrityError) costs a savepoint
around the INSERT so that a duplicate key does not abort the transaction:
four round trips where one will do. `INSERT … ON CONFLICT (key) DO NOTHING
RETURNING id` inserts the row or, when the key is taken, does nothing and
returns nothing; a concurrent insert of the same key waits on the unique
index and then does nothing. Hot paths use it (a sequence step's message and
next timer); it writes through no model `save()` and sends no signals, so it
is only for models that have neither.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Model


def row_insert_once(obj: Model, *, key: str) -> bool:
    """Insert `obj` unless a row with the same value of the unique field `key`
    exists. True, with the pk set, when this call inserted it."""
    meta = obj._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    assert meta.pk is not None
    table, columns = quote(meta.db_table), ", ".join(quote(f.column) for f in fields)
    conflict, returning = quote(str(getattr(meta.get_field(key), "column", key))), quote(meta.pk.column)
    # Names from the model's metadata, every value a parameter.
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))}) "  # noqa: S608
    sql += f"ON CONFLICT ({conflict}) DO NOTHING RETURNING {returning}"
    params = [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return False
    obj.pk = row[0]
    obj._state.adding, obj._state.db = False, connection.alias
    return True
