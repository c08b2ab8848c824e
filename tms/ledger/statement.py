"""One SQL statement of data-modifying CTEs over arrays (`unnest`), and the rows the ledger's
parts hand to it: a publish writes everything it stores in one such statement (the events,
their typed rows, the log's rows, the claims' keys: `tms.ledger.write.writes`), and the log
writes its own with it when it is built outside a publish (`tms.ledger.log.tree`). On a Citus
cluster the same `Rows` are inserted by one plain statement per table
(`tms.ledger.write.routed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    """One statement of data-modifying CTEs, and the arrays it binds."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.args: list[Any] = []
        self.result = "SELECT 1"  # the statement's own query, after its CTEs

    def arrays(self, columns: list[tuple[list[Any], str]]) -> str:
        """Bind each column as an array; the SQL that reads them, for `unnest(...)`."""
        placeholders = []
        for values, sql_type in columns:
            self.args.append(values)
            placeholders.append(f"${len(self.args)}::{sql_type}[]")
        return ", ".join(placeholders)

    def insert(self, name: str, rows: Rows) -> None:
        """A CTE named `name` inserting `rows`."""
        arrays = self.arrays(
            [([r[i] for r in rows.rows], sql_type) for i, (_, sql_type) in enumerate(rows.columns)]
        )
        names = ", ".join(column for column, _ in rows.columns)
        self.parts.append(
            f"{name} AS (INSERT INTO {rows.table} ({names}) "
            f"SELECT * FROM unnest({arrays}){rows.suffix})"
        )

    def sql(self) -> str:
        return "WITH " + ",\n".join(self.parts) + "\n" + self.result
