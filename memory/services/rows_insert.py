"""Set-based SQL for many rows in one statement with one parameter per column: INSERT … SELECT FROM
unnest(…) and UPDATE … FROM unnest(…).

`bulk_create` binds one parameter per value (100 cards × 36 columns ≈ 3,600), and building that
statement and binding its parameters costs more than the server's work. Here each column travels
as one array: scalars as an array of the column's type; `jsonb` and array columns as one JSON text
per row, cast back on the server (`jsonb` exactly, an array element by element in order); a vector
as its text form. The rows are those `bulk_create` would write (same `pre_save`, same
`get_db_prep_save`), in order (the audit chain's trigger links events in insert order), and the
objects come back saved: pk, database defaults and `db_returning` columns set, `_state` not adding.
Row-level security applies as to any INSERT (the app role writes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib.postgres.fields import ArrayField
from django.db import connections, models
from django.db.models.expressions import DatabaseDefault

from memory.models import vector_text

__all__ = ["rows_insert", "vectors_update"]


def _bound_cursor(connection: Any) -> Any:
    """A cursor that sends its parameters to the server (arrays dumped in binary) instead of quoting
    them into the statement as Django's client-side cursor does (a regex per array element); it
    goes through Django's cursor wrapper, so execute wrappers and query logging still see it."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    return connection._prepare_cursor(ServerBindingCursor(connection.connection))


def _column(field: models.Field, connection: Any) -> tuple[str, str]:
    """Return (parameter cast, select expression) for one column read from `v.<column>`."""
    column = connection.ops.quote_name(field.column)
    db_type = field.db_type(connection)
    if isinstance(field, models.JSONField):
        return "text[]", f"v.{column}::jsonb"
    if isinstance(field, ArrayField):
        if field.base_field.get_internal_type() not in ("CharField", "TextField"):
            raise NotImplementedError(f"{field.name}: only arrays of text travel as JSON here")
        return "text[]", (f"CASE WHEN v.{column} IS NULL THEN NULL ELSE ARRAY(SELECT e.value FROM "
                          f"jsonb_array_elements_text(v.{column}::jsonb) WITH ORDINALITY AS e(value, n) "
                          f"ORDER BY e.n)::{db_type} END")
    if db_type.startswith("vector"):
        return "text[]", f"v.{column}::{db_type}"
    return f"{db_type}[]", f"v.{column}"


# Values Django's `get_db_prep_save` returns unchanged on PostgreSQL (checked by exact type, so a
# subclass or a string for a UUID column still goes through the field).
_AS_IS = {"CharField": str, "TextField": str, "FloatField": float, "BooleanField": bool,
          "PositiveIntegerField": int, "IntegerField": int, "BigIntegerField": int, "UUIDField": UUID}


def _value(field: models.Field, value: Any, connection: Any) -> Any:
    if value is None:
        return None
    internal = field.get_internal_type() if not field.is_relation else None
    if type(value) is _AS_IS.get(internal) or (type(value) is datetime and value.tzinfo is not None
                                               and internal == "DateTimeField"):
        return value
    if isinstance(field, models.JSONField):
        return json.dumps(field.get_prep_value(value), cls=field.encoder)
    if isinstance(field, ArrayField):
        return json.dumps(list(value))
    prepared = field.get_db_prep_save(value, connection)
    if field.db_type(connection).startswith("vector"):
        return prepared if isinstance(prepared, str) else vector_text(value)
    return prepared


def rows_insert(model: type[models.Model], objs: Sequence[models.Model], *, using: str = "default") -> None:
    """Insert `objs` (unsaved, in order) with one INSERT … SELECT FROM unnest(…); errors as the INSERT's."""
    if not objs:
        return
    connection = connections[using]
    opts = model._meta
    fields, returning = [], []
    for field in opts.concrete_fields:
        if getattr(field, "generated", False):
            continue
        values = [field.pre_save(obj, add=True) for obj in objs]
        defaults = [isinstance(value, DatabaseDefault) for value in values]
        if all(defaults) or (field.primary_key and all(value is None for value in values)):
            returning.append(field)  # the database sets it: read it back
            continue
        if any(defaults):
            raise NotImplementedError(f"{field.name}: database defaults for some rows only")
        fields.append((field, values))
    quote = connection.ops.quote_name
    names = ", ".join(quote(field.column) for field, _ in fields)
    columns = [_column(field, connection) for field, _ in fields]
    sql = (f"INSERT INTO {quote(opts.db_table)} ({names}) SELECT {', '.join(expr for _, expr in columns)} "
           f"FROM unnest({', '.join(f'%s::{cast}' for cast, _ in columns)}) WITH ORDINALITY "
           f"AS v({names}, _n) ORDER BY v._n")
    if returning:
        sql += " RETURNING " + ", ".join(quote(field.column) for field in returning)
    params = [[_value(field, value, connection) for value in values] for field, values in fields]
    with _bound_cursor(connection) as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall() if returning else []
    converters = [connection.ops.get_db_converters(field) + field.get_db_converters(connection)
                  for field in returning]
    for index, obj in enumerate(objs):
        for position, field in enumerate(returning):
            value = rows[index][position]
            for converter in converters[position]:
                value = converter(value, field, connection)
            setattr(obj, field.attname, value)
        obj._state.adding = False
        obj._state.db = using


def vectors_update(model: type[models.Model], *, tenant_id: int, pks: Sequence[Any],
                   vectors: Sequence[Sequence[float]], model_id: str, using: str = "default") -> None:
    """Set `embedding` (and `embedding_model`) of the rows `pks` of one tenant in one UPDATE."""
    if not pks:
        return
    connection = connections[using]
    opts = model._meta
    quote = connection.ops.quote_name
    table, pk = quote(opts.db_table), opts.pk
    embedding = opts.get_field("embedding")
    sql = (f"UPDATE {table} AS t SET embedding = v.vec::{embedding.db_type(connection)}, "
           "embedding_model = %s "
           f"FROM unnest(%s::{pk.db_type(connection)}[], %s::text[]) AS v(id, vec) "
           f"WHERE t.tenant_id = %s AND t.{quote(pk.column)} = v.id")
    params = [model_id, [pk.get_db_prep_value(value, connection) for value in pks],
              [_value(embedding, vector, connection) for vector in vectors], tenant_id]
    with _bound_cursor(connection) as cursor:
        cursor.execute(sql, params)
