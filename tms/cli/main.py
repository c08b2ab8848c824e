"""`tms`: the operator's command line. This module reads the arguments (`tms.cli.parser`) and
runs the command they name; each command lives in a module of its own:

- `verify` (`tms.cli.verify`) checks an exported JSON Lines file offline, line by line, exactly
  as a member's own Nostr library would: envelope, id, signature, and the kind's content schema.
  `verify-export` (`tms.cli.verify_export`) checks it against its collection's signed
  transparency log.
- `fetch URL` (`tms.cli.fetch`) downloads a page or document as the ledger's `fetch_url` tool
  does and prints `{"url", "title", "chars", "text"}` as one JSON line; a refusal is one line on
  stderr, exit 2.
- `serve` runs the HTTP server; `stdio` serves the same MCP tools over stdin and stdout for a
  local agent (`tms.cli.server`).
- The operator's commands work on the same database as the server (`TMS_DATABASE_URL`, else the
  embedded PostgreSQL in `TMS_DATA_DIR`; `tms.cli.database`), whether or not the server is
  running; each says on stderr which database it opens, and one that would make a new embedded
  database where there is none refuses unless given `--create` (`tms serve` may make one):
  `migrate [--distribute]` (`tms.cli.migrate`) applies the migrations (the server does
  too, at start-up) and, on a Citus coordinator, distributes the ledger (`tms.store.citus`);
  `approve`, `revoke` and `approved` (`tms.cli.approvals`); `collections` and `export`
  (`tms.cli.backups`); `receipt`, a receipt for one event, and `verify-receipt`, which checks
  one offline (`tms.cli.receipts`); `backup` and `restore`, the whole database as a pg_dump
  archive, and `database-url`, the URL for PostgreSQL's own programs (`tms.cli.dumps`); `refusals`
  (`tms.cli.refusals`). A bad key is one line on stderr and exit 2 (`tms.cli.notation`); a
  database that cannot be used, or an unknown collection, one line and exit 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from tms.cli.approvals import approve, approved, revoke
from tms.cli.backups import collections, export
from tms.cli.database import run_on_database
from tms.cli.dumps import backup, database_url, restore
from tms.cli.fetch import fetch
from tms.cli.migrate import migrate
from tms.cli.notation import pubkeys, since_when
from tms.cli.parser import build_parser
from tms.cli.refusals import refusals
from tms.cli.server import serve, stdio
from tms.cli.verify import verify


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "verify":
        raise SystemExit(verify(ns.file))
    if ns.command == "fetch":
        raise SystemExit(fetch(ns.url))
    if ns.command == "serve":
        raise SystemExit(
            serve(ns.host, ns.port, ns.log_level, new_log_key=ns.new_log_key, workers=ns.workers)
        )
    if ns.command == "stdio":
        raise SystemExit(stdio(create=ns.create, new_log_key=ns.new_log_key))
    if ns.command == "migrate":
        raise SystemExit(
            run_on_database(migrate(ns.distribute, ns.despite_older), create=ns.create)
        )
    if ns.command in ("approve", "revoke"):
        keys = pubkeys(ns.keys, f"{ns.command}d")
        if keys is None:
            raise SystemExit(2)
        command = (approve if ns.command == "approve" else revoke)(keys)
        raise SystemExit(run_on_database(command, create=ns.create))
    if ns.command == "approved":
        raise SystemExit(run_on_database(approved(), create=ns.create))
    if ns.command == "collections":
        raise SystemExit(run_on_database(collections(ns.slugs), create=ns.create))
    if ns.command == "export":
        command = export(ns.slug, ns.checkpoint, ns.format)
        raise SystemExit(run_on_database(command, create=ns.create))
    if ns.command == "database-url":
        raise SystemExit(run_on_database(database_url()))
    if ns.command == "backup":
        raise SystemExit(run_on_database(backup(ns.file)))
    if ns.command == "restore":
        raise SystemExit(run_on_database(restore(ns.file), create=ns.create))
    if ns.command == "verify-export":
        from tms.cli.verify_export import run

        raise SystemExit(run(ns.file, ns.checkpoint, ns.key, sys.stdout, policy_path=ns.policy))
    if ns.command == "receipt":
        from tms.cli.receipts import receipt

        raise SystemExit(run_on_database(receipt(ns.slug, ns.event_id), create=ns.create))
    if ns.command == "verify-receipt":
        from tms.cli.receipts import verify_receipt

        raise SystemExit(verify_receipt(ns.event, ns.receipt, ns.key, ns.policy, sys.stdout))
    if ns.command == "mirror":
        from tms.cli.mirror import mirror

        raise SystemExit(
            mirror(
                ns.relay,
                ns.dir,
                nsec=ns.nsec,
                once=ns.once,
                push=ns.push,
                policy_path=ns.policy,
                log_key=ns.key,
            )
        )
    if ns.command == "refusals":
        since = since_when(ns.since, datetime.now(UTC))
        if since is None:
            print(
                f"tms: --since {ns.since!r}: give an age (15m, 1h, 7d) or an ISO 8601 time",
                file=sys.stderr,
            )
            raise SystemExit(2)
        keys = pubkeys([ns.key], "shown") if ns.key is not None else []
        if keys is None:
            raise SystemExit(2)
        if not 0 <= ns.limit <= 100_000:
            print("tms: --limit must be from 0 to 100000", file=sys.stderr)
            raise SystemExit(2)
        command = refusals(since, keys[0] if keys else None, ns.limit)
        raise SystemExit(run_on_database(command, create=ns.create))
