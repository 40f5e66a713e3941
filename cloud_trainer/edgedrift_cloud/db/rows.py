"""Many-row writes in one statement: plain inserts and atomic counter upserts.

On PostgreSQL the rows travel as one JSON parameter (``INSERT ... SELECT * FROM json_to_recordset(:rows)``):
the statement's text is the same for any number of rows, so it is built once, the rows are encoded by
``json.dumps`` (C) instead of the driver's per-value adaptation, and the server does the parsing. A
gateway's batch of 1,000 heartbeats took 150-190 ms of a worker's CPU, and its GIL, as a multi-row
``VALUES`` and an ``executemany`` (figures: docs/benchmarks.md). SQLite gets the multi-row statements,
which it handles cheaply in-process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Table, TextClause, case, insert, or_, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Session

#: The timestamp an upsert keeps as the newer of the stored and the new one.
LAST_SEEN = "last_seen"


def insert_rows(session: Session, model: type[DeclarativeBase], rows: Sequence[Mapping[str, object]]) -> None:
    """Insert ``rows`` (dicts with the same keys) into ``model``'s table (JSON columns take objects)."""
    if not rows:
        return
    table, columns, dialect = _target(session, model, rows)
    if dialect.name == "postgresql":
        session.execute(_recordset_insert(table, columns, dialect), {"rows": _json_rows(rows)})
    else:
        session.execute(insert(table), list(rows))


def upsert(
    session: Session,
    model: type[DeclarativeBase],
    rows: Sequence[Mapping[str, object]],
    add: Sequence[str],
    replace: Sequence[str] = (),
) -> None:
    """Insert ``rows``, or on a key that exists add the ``add`` columns to it, overwrite ``replace`` and
    keep the newer ``last_seen``: one atomic statement, safe against concurrent writers. A key may
    appear once per call."""
    if not rows:
        return
    table, columns, dialect = _target(session, model, rows)
    if dialect.name == "postgresql":
        statement = _recordset_upsert(table, columns, tuple(add), tuple(replace), dialect)
        session.execute(statement, {"rows": _json_rows(rows)})
        return
    values = sqlite.insert(table).values(list(rows))
    new = values.excluded
    update_set: dict[str, ColumnElement[object]] = {c: table.c[c] + new[c] for c in add}
    update_set.update({c: new[c] for c in replace})
    if LAST_SEEN in columns:
        old = table.c[LAST_SEEN]
        update_set[LAST_SEEN] = case((or_(old.is_(None), new[LAST_SEEN] > old), new[LAST_SEEN]), else_=old)
    session.execute(values.on_conflict_do_update(index_elements=_keys(table), set_=update_set))


def _table(model: type[DeclarativeBase], columns: Sequence[str]) -> Table:
    """``model``'s table; a column with a Python-side default must be given, since the statements on
    PostgreSQL do not apply those defaults."""
    table = model.__table__
    assert isinstance(table, Table)
    missing = [c.name for c in table.columns if c.default is not None and c.name not in columns]
    if missing:
        raise ValueError(f"rows for {table.name} need the columns {missing} (defaults are not applied)")
    return table


def _target(
    session: Session, model: type[DeclarativeBase], rows: Sequence[Mapping[str, object]]
) -> tuple[Table, tuple[str, ...], Dialect]:
    """The table, the rows' columns and the session's dialect of one batch."""
    columns = tuple(rows[0])
    return _table(model, columns), columns, session.get_bind().dialect


def _keys(table: Table) -> list[str]:
    return [c.name for c in table.primary_key.columns]


def _json_rows(rows: Sequence[Mapping[str, object]]) -> str:
    return json.dumps(list(rows), default=_iso, allow_nan=False, separators=(",", ":"))


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a column value")


def _recordset_select(table: Table, columns: tuple[str, ...], dialect: Dialect) -> str:
    """``INSERT INTO t (a, b) SELECT a, b FROM json_to_recordset(:rows) AS r(a type, b type)``."""
    names = ", ".join(columns)
    typed = ", ".join(f"{c} {table.c[c].type.compile(dialect=dialect)}" for c in columns)
    source = f"json_to_recordset(CAST(:rows AS json)) AS r({typed})"
    return f"INSERT INTO {table.name} ({names}) SELECT {names} FROM {source}"


@functools.cache
def _recordset_insert(table: Table, columns: tuple[str, ...], dialect: Dialect) -> TextClause:
    return text(_recordset_select(table, columns, dialect))


@functools.cache
def _recordset_upsert(
    table: Table, columns: tuple[str, ...], add: tuple[str, ...], replace: tuple[str, ...], dialect: Dialect
) -> TextClause:
    name = table.name
    sets = [f"{c} = {name}.{c} + excluded.{c}" for c in add] + [f"{c} = excluded.{c}" for c in replace]
    if LAST_SEEN in columns:
        old = f"{name}.{LAST_SEEN}"
        sets.append(
            f"{LAST_SEEN} = CASE WHEN {old} IS NULL OR excluded.{LAST_SEEN} > {old} "
            f"THEN excluded.{LAST_SEEN} ELSE {old} END"
        )
    conflict = f" ON CONFLICT ({', '.join(_keys(table))}) DO UPDATE SET {', '.join(sets)}"
    return text(_recordset_select(table, columns, dialect) + conflict)
