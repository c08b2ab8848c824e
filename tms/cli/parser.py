"""The `tms` command line's grammar: every command's name, arguments and help texts, as
`tms --help` and each command's `--help` print them. What each command does is in its own module
(`tms.cli.main` says which)."""

from __future__ import annotations

import argparse
from importlib.metadata import version
from pathlib import Path

from tms.cli.backups import FORMATS
from tms.config import LOG_LEVELS


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    details: str = "",
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` says what it does (`help` alone shows only in `tms -h`)."""
    description = summary[0].upper() + summary[1:] + "." + (f" {details}" if details else "")
    return commands.add_parser(name, help=summary, description=description)


CREATE_HELP = (
    "make a new, empty embedded database in TMS_DATA_DIR if there is none (without it, the "
    "command refuses: a data directory that is not the server's is a mistake)"
)


def _creates(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A command that opens the database: `--create` lets it make a new embedded one."""
    command.add_argument("--create", action="store_true", help=CREATE_HELP)
    return command


NEW_LOG_KEY_HELP = (
    "start even though the database holds checkpoints and there is no log key (no "
    "TMS_DATA_DIR/log-key, no TMS_LOG_KEY): a new key is made, and every checkpoint signed "
    "before reads as another server's. Without it, start-up refuses: copy the old log-key first"
)


def _new_log_key(command: argparse.ArgumentParser) -> None:
    command.add_argument("--new-log-key", action="store_true", help=NEW_LOG_KEY_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tms", description="TMS, the evidence ledger.")
    parser.add_argument("--version", action="version", version=f"tms {version('tms')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    verify = _command(
        commands,
        "verify",
        "check every line of a JSON Lines export: envelope, id, signature, schema",
        "Offline, line by line, as any Nostr library would. Exit 1 if a line is invalid. "
        "To prove the file holds its whole collection, use tms verify-export.",
    )
    verify.add_argument("file", help="the .jsonl file, or - for standard input")
    fetch = _command(
        commands,
        "fetch",
        "download a page or PDF as evidence text; print {url, title, chars, text} as JSON",
        "Exactly as the fetch_url tool and the Fetch button do (same size, time and address "
        "rules). A refusal is one line on stderr, exit 2.",
    )
    fetch.add_argument("url", help="an http or https URL")
    serve = _command(
        commands,
        "serve",
        "run the HTTP server (TMS_HOST and TMS_PORT, default 127.0.0.1:8000)",
        "Pages, /mcp, the relay and exports, on TMS_DATABASE_URL or the embedded PostgreSQL in "
        "TMS_DATA_DIR. Set TMS_BASE_URL to the public URL in production. Stops cleanly on "
        "SIGTERM or Ctrl-C.",
    )
    serve.add_argument("--host", help="address to listen on (overrides TMS_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (overrides TMS_PORT)")
    serve.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="the least severe log lines shown (overrides TMS_LOG_LEVEL; default info)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="server processes sharing the port, supervised, with one database (overrides "
        "TMS_WORKERS; default the machine's cores, at most 8)",
    )
    _new_log_key(serve)
    stdio = _command(
        commands,
        "stdio",
        "serve the MCP tools over stdin/stdout, for a local agent",
        "The same tools as /mcp, on the server's database. With TMS_NSEC set (an nsec or 64 "
        "hex), tool calls without a request are signed with that key; events for publish still "
        "need signing (tms-sign event).",
    )
    _creates(stdio)
    _new_log_key(stdio)
    migrate = _command(
        commands,
        "migrate",
        "apply the database migrations (the server does at start-up)",
        "On a Citus coordinator, --distribute spreads the ledger over the workers by collection "
        "(once: later migrations' tables follow by themselves). Prints each migration applied, "
        "and on Citus where each table lives. Refuses while an older TMS server is connected.",
    )
    migrate.add_argument(
        "--distribute",
        action="store_true",
        help="distribute the tables by collection over the Citus cluster",
    )
    migrate.add_argument(
        "--despite-older",
        action="store_true",
        help="migrate even while older TMS servers are connected (they may break: stop them first)",
    )
    _creates(migrate)
    approve = _command(
        commands,
        "approve",
        "approve keys: they may log in, use the service and create collections",
        "Keys as npub or 64 hex. Members of a collection need no approval: its owner adds them "
        "on the members page. Works whether or not the server is running.",
    )
    approve.add_argument("keys", nargs="+", metavar="NPUB_OR_HEX", help="a key: npub or 64 hex")
    _creates(approve)
    revoke = _command(
        commands,
        "revoke",
        "withdraw approvals",
        "The keys may no longer create collections, nor log in unless a collection lists them; "
        "what they signed stays, and collections they own stay theirs. Keys as npub or 64 hex.",
    )
    revoke.add_argument("keys", nargs="+", metavar="NPUB_OR_HEX", help="a key: npub or 64 hex")
    _creates(revoke)
    _creates(_command(commands, "approved", "list approved keys: npub, hex, approved_at"))
    collections = _command(
        commands,
        "collections",
        "list every collection: slug, owner, record counts, members, created",
        "One line a collection, oldest first, after a header. --slugs prints the slugs alone, "
        "for a backup loop: for s in $(tms collections --slugs); do tms export $s --checkpoint "
        "> $s.jsonl; done",
    )
    collections.add_argument(
        "--slugs", action="store_true", help="print only the slugs, one a line, no header"
    )
    _creates(collections)
    export = _command(
        commands,
        "export",
        "write a collection as JSON Lines to stdout, from the database (backups)",
        "Every event of the collection in ledger order, with its authors' terms and profiles; "
        "tms collections lists the slugs. --format annotations writes its links as W3C Web "
        "Annotations instead (JSON-LD, what GET /c/SLUG/annotations.jsonld serves).",
    )
    export.add_argument("slug", help="the collection")
    export.add_argument(
        "--checkpoint",
        action="store_true",
        help="end with the log's signed checkpoint line, for tms verify-export",
    )
    export.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="jsonl: every signed event, one a line (the default); annotations: the links as "
        "one W3C AnnotationCollection, each annotation carrying its signed event",
    )
    _creates(export)
    _command(
        commands,
        "database-url",
        "print the URL of the database the other commands open (for pg_dump, psql...)",
        "TMS_DATABASE_URL as set, else the embedded PostgreSQL's, which holds only while it runs "
        "(while tms serve does): refused when it is not running, or when there is no database.",
    )
    backup = _command(
        commands,
        "backup",
        "write the whole database to FILE (pg_dump's custom format), whether or not the server "
        "runs",
        "Approvals, sessions, vectors and the refusal log included, consistent at one moment, "
        "with the pg_dump the embedded PostgreSQL ships. The log key and the login secret are "
        "not in it: keep TMS_DATA_DIR/log-key and secret (or TMS_LOG_KEY, TMS_SECRET) with it. "
        "Not on a Citus cluster.",
    )
    backup.add_argument("file", type=Path, help="the archive to write (a new file)")
    restore = _command(
        commands,
        "restore",
        "restore a tms backup into a database that holds no ledger yet",
        "In one transaction, with the embedded PostgreSQL's pg_restore: into a new data "
        "directory (TMS_DATA_DIR=... tms restore --create FILE), or a new, empty database "
        "(TMS_DATABASE_URL, its vector extension created first). Copy the old log-key and "
        "secret into the new data directory before starting the server.",
    )
    restore.add_argument("file", type=Path, help="the archive tms backup wrote")
    _creates(restore)
    audit = _command(
        commands,
        "verify-export",
        "prove offline that an export holds its collection's whole log, unaltered and in "
        "order, against signed checkpoints",
        "Without any checkpoint (an export taken without --checkpoint or ?checkpoint=1, and "
        "none given), every line and the file against itself are still checked, but nothing "
        "proves it whole: exit 1. Exit 2 if it cannot run.",
    )
    audit.add_argument("file", help="the export (.jsonl), ideally ending with its checkpoint line")
    audit.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a checkpoint you kept (a signed note, or JSON holding one): the export must "
        "extend it",
    )
    audit.add_argument(
        "--key",
        required=True,
        metavar="VERIFIER_KEY",
        help="the server's log key (GET /log-key), or a file holding it",
    )
    audit.add_argument(
        "--policy",
        metavar="FILE",
        help="a witness policy (C2SP tlog-policy): accept a checkpoint only when its quorum of "
        "witnesses cosigned it, and name who did",
    )
    receipt = _command(
        commands,
        "receipt",
        "write a receipt for one event to stdout, from the database: a C2SP tlog-proof for "
        "tms verify-receipt",
        "The event, its index in its collection's log, its inclusion path and the checkpoint "
        "the collection's /checkpoint serves (with witnesses, the quorum's cosignatures in "
        "it). Members get the same from GET /c/<slug>/receipt/<id> or the get_receipt tool. "
        "Exit 1 if the collection has no such event.",
    )
    receipt.add_argument("slug", help="the collection")
    receipt.add_argument("event_id", metavar="EVENT_ID", help="the event's id (64 hex)")
    _creates(receipt)
    checked = _command(
        commands,
        "verify-receipt",
        "check a receipt offline: the event's id and signature, that the log holds it, the "
        "checkpoint's signatures and, with --policy, the witnesses' quorum",
        "Prints each step that holds; on the first that fails, names it (format, event, "
        "entry, log signature, inclusion, quorum) and exits 1. Exit 2 if it cannot run.",
    )
    checked.add_argument(
        "event",
        metavar="EVENT",
        help="the event's id (64 hex; the receipt carries the event), or a file holding the "
        "event's JSON",
    )
    checked.add_argument("receipt", metavar="RECEIPT", help="the .tlog-proof file")
    checked.add_argument(
        "--key",
        metavar="VERIFIER_KEY",
        help="the server's log key (GET /log-key), or a file holding it; without it, the "
        "policy's log lines",
    )
    checked.add_argument(
        "--policy",
        metavar="FILE",
        help="a witness policy (C2SP tlog-policy): accept the checkpoint only when its quorum "
        "of witnesses cosigned it",
    )
    mirrored = _command(
        commands,
        "mirror",
        "keep a verified copy of a collection: NIP-77 down, then follow it live",
        "Authenticates as the key (--nsec, else TMS_NSEC), brings the collection's events "
        "into DIR/copy.jsonl (the export's format: tms verify-export reads it, with "
        "--checkpoint DIR/state.json), and after every sync checks them against the server's "
        "checkpoint: exactly the log's entries, extending what the copy kept, with --policy "
        "cosigned by its quorum. Any mismatch stops it (exit 1) and leaves DIR as it was.",
    )
    mirrored.add_argument("relay", help="the collection's relay: ws[s]://host/c/<slug>")
    mirrored.add_argument("--dir", required=True, metavar="DIR", help="where the copy is kept")
    mirrored.add_argument("--nsec", help="the member's key (nsec1... or hex); else TMS_NSEC")
    mirrored.add_argument("--once", action="store_true", help="sync and verify, then exit")
    mirrored.add_argument(
        "--push", action="store_true", help="also publish the events only the copy holds"
    )
    mirrored.add_argument("--policy", metavar="FILE", help="a witness policy (C2SP tlog-policy)")
    mirrored.add_argument(
        "--key", metavar="VERIFIER_KEY", help="the server's log key (default: kept, or fetched)"
    )
    refusals = _command(
        commands,
        "refusals",
        "what was refused (bad signatures, non-members, replays, rate limits, SSRF...): "
        "counts by kind, then the newest records",
    )
    refusals.add_argument(
        "--since", default="24h", help="an age (15m, 1h, 7d) or an ISO 8601 time; default 24h"
    )
    refusals.add_argument("--key", metavar="NPUB_OR_HEX", help="only this key's refusals")
    refusals.add_argument(
        "--limit", type=int, default=50, help="newest records to list (default 50; 0: counts only)"
    )
    _creates(refusals)
    return parser
