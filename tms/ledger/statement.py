"""One SQL statement of data-modifying CTEs over bound columns, and the rows the ledger's
parts hand to it: a publish writes everything it stores in one such statement (the events,
their typed rows, the log's rows, the claims' keys: `tms.ledger.write.writes`), and the log
writes its own with it when it is built outside a publish (`tms.ledger.log.tree`). On a Citus
cluster the same `Rows` are inserted by one plain statement per table
(`tms.ledger.write.routed`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from tms.rules.kinds import Columns


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows another part of the ledger stores with a publish's write, in its transaction (the
    transparency log's, the claims' keys): inserted by the one statement
    (`tms.ledger.write.writes.write`) or by a statement of their own on Citus
    (`tms.ledger.write.routed`). `suffix` follows the rows (an `ON CONFLICT` clause)."""

    table: str
    columns: Columns  # (name, SQL type), in the rows' order
    rows: list[tuple[Any, ...]]
    suffix: str = ""


class Statement:
    """One statement of data-modifying CTEs, and the values it binds."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.args: list[Any] = []
        self.result = "SELECT 1"  # the statement's own query, after its CTEs

    def arrays(self, columns: list[tuple[list[Any], str]]) -> str:
        """Bind each column as an array; the SQL that reads them (as `ANY(...)` does)."""
        placeholders = []
        for values, sql_type in columns:
            self.args.append(values)
            placeholders.append(f"${len(self.args)}::{sql_type}[]")
        return ", ".join(placeholders)

    def source(self, columns: list[tuple[list[Any], str]], *, ordinality: bool = False) -> str:
        """Bind each column as one JSON array; the SQL that reads them back as rows of the
        columns' types, for `FROM <source> AS u(names)` (`ordinality`: and each row's place,
        from 1, as a last column).

        JSON rather than arrays: asyncpg's array encoder asks two `isinstance` questions of
        abstract base classes of every element it binds, which cost more than encoding it (a
        publish binds about 25 values an event); one JSON text per column is encoded in C,
        and PostgreSQL reads it back in about the time it takes to read an array. Binary
        values go as hex."""
        reads, names, casts = [], [], []
        for n, (values, sql_type) in enumerate(columns):
            if sql_type == "bytea":
                values = [None if v is None else v.hex() for v in values]
                casts.append(f"decode(c{n}, 'hex')")
            else:
                casts.append(f"c{n}::{sql_type}")
            self.args.append(_JSON.encode(values))
            reads.append(f"json_array_elements_text(${len(self.args)}::json)")
            names.append(f"c{n}")
        if ordinality:
            names.append("n")
            casts.append("n")
        ordered = " WITH ORDINALITY" if ordinality else ""
        return (
            f"(SELECT {', '.join(casts)} FROM ROWS FROM ({', '.join(reads)}){ordered} "
            f"AS j({', '.join(names)}))"
        )

    def insert(self, name: str, rows: Rows) -> None:
        """A CTE named `name` inserting `rows`."""
        source = self.source(
            [([r[i] for r in rows.rows], sql_type) for i, (_, sql_type) in enumerate(rows.columns)]
        )
        names = ", ".join(column for column, _ in rows.columns)
        self.parts.append(
            f"{name} AS (INSERT INTO {rows.table} ({names}) "
            f"SELECT * FROM {source} AS u{rows.suffix})"
        )

    def sql(self) -> str:
        return "WITH " + ",\n".join(self.parts) + "\n" + self.result


# Compact, and UTF-8 as it is (PostgreSQL reads escapes and characters alike).
_JSON: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
