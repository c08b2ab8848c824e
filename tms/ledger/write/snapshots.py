"""What a publish reads under its locks (`tms.ledger.locks`, `tms.ledger.write.writes`), for the
rules to judge it against: the ledger as the batch finds it (`snapshot`), and where each quote
of the batch's links sits in its evidence (`quotes`).

The snapshot is one round trip whatever the batch holds (a batch of several collections reads
`also` in one more per collection), and the quotes one per quoted evidence stored before. Other
parts of the ledger that keep rows per collection (the transparency log) read their state with
the snapshot (`also`), rather than in round trips of their own. It is read after the locks are
held, never by the statement that waits for them: in READ COMMITTED a statement reads the ledger
as it stood when the statement began, so a snapshot read in the statement that takes the locks
could miss what the batch it waited for had written. With `lock`, one round trip does both: a
function of the connection's own (`pg_temp`, made on its first use) takes the locks, then reads
the snapshot in its next statement, which a VOLATILE function runs with a fresh snapshot.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import asyncpg

from tms.ledger.locks import lock_keys
from tms.ledger.write.writes import collections
from tms.rules.anchors import Verdict
from tms.rules.publish import (
    Parsed,
    Ref,
    Snapshot,
    batch_texts,
    quotes_by_evidence,
    quotes_found,
    referenced_ids,
)
from tms.rules.terms import current_terms
from tms.store.database import Connection
from tms.types import KIND_JOIN, KIND_MEMBERS, EventId

# $1 the batch's ids, $2 its signers, $3 its collections, $4 the ids it cites, $5 and $6 the
# current terms, $7 where its own events would be filed ($3, and UNSCOPED for profiles and
# terms). One JSON document, parsed in Python: one round trip for all of it. Events are looked
# up only under the batch's collections: an event id fixes its content, so a stored event can
# only be filed where the batch's copy names, and a cited event elsewhere is refused exactly as
# a missing one (on Citus, this keeps the statement on the batch's shard).
_SQL_SNAPSHOT: Final = """
    SELECT json_build_object(
        'stored', (SELECT json_agg(id) FROM events
                   WHERE collection = ANY($7::text[]) AND id = ANY($1::text[])),
        'approved', (SELECT json_agg(pubkey) FROM approvals WHERE pubkey = ANY($2::text[])),
        'terms', (SELECT json_agg(DISTINCT pubkey) FROM terms_signatures
                  WHERE pubkey = ANY($2::text[]) AND version = $5 AND sha256 = $6),
        'belongs', (SELECT json_agg(json_build_array(pubkey, collection)) FROM readers
                    WHERE pubkey = ANY($2::text[])),
        'collections', (
            SELECT json_agg(json_build_array(
                c.slug, c.owner, h.list_id, h.created_at,
                (SELECT json_agg(m.pubkey) FROM memberships m WHERE m.collection = c.slug)))
            FROM collections c LEFT JOIN current_member_lists h ON h.collection = c.slug
            WHERE c.slug = ANY($3::text[])),
        'head_kinds', (SELECT json_agg(json_build_array(e.collection, e.kind)) FROM events e
                       JOIN current_member_lists h ON h.collection = e.collection
                                                   AND h.list_id = e.id
                       WHERE e.collection = ANY($3::text[])),
        'invites', {invites},
        'refs', (SELECT json_agg(json_build_array(id, kind, collection)) FROM events
                 WHERE collection = ANY($3::text[]) AND id = ANY($4::text[])),
        'profiles', (
            SELECT json_agg(json_build_array(pubkey, created_at, id)) FROM (
                SELECT DISTINCT ON (pubkey) pubkey, created_at, id FROM profiles
                WHERE pubkey = ANY($2::text[]) ORDER BY pubkey, created_at DESC, id) AS p){also}
    )::text"""
# The unused invites of the batch's collections (sql/026), read only for a batch that holds a
# join (NIP-43): every other batch reads none.
_SQL_INVITES: Final = """(
            SELECT json_agg(json_build_array(i.collection, i.target)) FROM member_changes i
            WHERE i.collection = ANY($3::text[]) AND i.method = 'createinvite'
              AND NOT EXISTS (SELECT 1 FROM member_changes j WHERE j.collection = i.collection
                              AND j.method = 'join' AND j.claim = i.target))"""
# A quoted evidence's text: $1 its id, $2 the collections it may be in (the batch's).
SQL_TEXT: Final = "SELECT text FROM evidence WHERE id = $1 AND collection = ANY($2::text[])"

OffLoop = Callable[..., Awaitable[Any]]  # runs a CPU-bound function off the event loop


# The function that takes the locks (session-level: `tms.ledger.write.writes.session_locks` lets
# them go) and then reads the snapshot: {name} is made from a digest of {body}, the snapshot's
# statement (its $1 to $7), so that each form of it gets a function of its own; $8 the lock
# keys, sorted (`tms.ledger.locks.hold_locks`' order and hash).
_SQL_LOCKED_SNAPSHOT: Final = """
    CREATE FUNCTION pg_temp.{name}(text[], text[], text[], text[], text, text, text[], text[])
    RETURNS text LANGUAGE plpgsql VOLATILE AS $tms$
    DECLARE
        key text;
    BEGIN
        FOREACH key IN ARRAY $8 LOOP
            PERFORM pg_advisory_lock(hashtextextended(key, 7));
        END LOOP;
        RETURN ({body});
    END $tms$"""
_SQL_CALL_LOCKED: Final = (
    "SELECT pg_temp.{name}($1::text[], $2::text[], $3::text[], $4::text[], $5::text, $6::text, "
    "$7::text[], $8::text[])"
)


async def snapshot(
    conn: Connection,
    batch: Sequence[Parsed],
    also: Mapping[str, str] | None = None,
    *,
    lock: Sequence[str] | None = None,
) -> tuple[Snapshot, dict[str, Any]]:
    """The ledger as the batch finds it, limited to what the batch touches; and, under each
    name in `also`, the JSON array its SQL expression makes over `{collections}` (the batch's
    collections, a text[]), read in the same round trip. A batch of several collections reads
    `also` one collection at a time, in statements of their own, and gets the arrays joined (a
    batch of none gets null): each statement about one collection's rows, so that on Citus it
    runs on that collection's worker (such an expression over collections on several workers
    is more than Citus plans). The collections are locked, so what the extra statements read is
    what the first one would have. `lock`: take these lock keys first, as session-level locks,
    in the same round trip (outside a transaction: the caller lets them go)."""
    terms = current_terms()
    slugs = collections(batch)
    inline = (also or {}) if len(slugs) == 1 else {}
    extra = "".join(
        f",\n        '{name}', {sql.format(collections='$3::text[]')}"
        for name, sql in inline.items()
    )
    joins = any(p.event.kind == KIND_JOIN for p in batch)
    sql = _SQL_SNAPSHOT.format(also=extra, invites=_SQL_INVITES if joins else "NULL")
    args = [
        [p.event.id for p in batch],
        sorted({p.event.pubkey for p in batch}),
        slugs,
        # Batch ids stay in: an event re-sent in the batch may be stored already (and
        # skipped), and the events after it may cite it.
        sorted(referenced_ids(batch)),
        terms["version"],
        terms["sha256"],
        list(lock_keys(batch)),
    ]
    if lock is None:
        document = await conn.fetchval(sql, *args)
    else:
        document = await _locked(conn, sql, [*args, sorted(lock)])
    found = json.loads(document)
    s = Snapshot()
    s.stored_ids = set(found["stored"] or ())
    s.approved = set(found["approved"] or ())
    s.terms_signed = set(found["terms"] or ())
    for pubkey, collection in found["belongs"] or ():
        s.belongs_to.setdefault(pubkey, set()).add(collection)
    # a head's kind read apart, not in a subquery per collection: on Citus the events are
    # distributed and the collections a reference table, which a correlated subquery cannot join
    head_kinds = dict(found["head_kinds"] or ())
    for slug, owner, list_id, list_created_at, members in found["collections"] or ():
        s.owners[slug] = owner
        s.members[slug] = set(members or ())
        if list_id is not None:
            s.heads[slug] = (list_created_at, list_id)
            if head_kinds.get(slug) != KIND_MEMBERS:
                s.change_heads.add(slug)
    for slug, invite in found["invites"] or ():
        s.invites.setdefault(slug, set()).add(invite)
    s.refs = {event_id: Ref(kind, collection) for event_id, kind, collection in found["refs"] or ()}
    s.profiles = {
        pubkey: (created_at, event_id) for pubkey, created_at, event_id in found["profiles"] or ()
    }
    read = {name: found[name] for name in inline}
    for name, sql in (also or {}).items():
        if name not in inline:
            rows: list[Any] = []
            for slug in slugs:
                one = await conn.fetchval(
                    f"SELECT {sql.format(collections='$1::text[]')}::text", [slug]
                )
                rows.extend(json.loads(one) if one is not None else ())
            read[name] = rows or None
    return s, read


async def _locked(conn: Connection, body: str, args: list[Any]) -> Any:
    """The snapshot `body` read by the connection's locking function, made on first use."""
    name = "tms_locked_snapshot_" + hashlib.sha256(body.encode()).hexdigest()[:16]
    call = _SQL_CALL_LOCKED.format(name=name)
    try:
        return await conn.fetchval(call, *args)
    except (asyncpg.UndefinedFunctionError, asyncpg.InvalidSchemaNameError):  # no pg_temp yet
        await conn.execute(_SQL_LOCKED_SNAPSHOT.format(name=name, body=body))
        return await conn.fetchval(call, *args)


async def quotes(conn: Connection, batch: Sequence[Parsed], run: OffLoop) -> dict[EventId, Verdict]:
    """`Snapshot.quotes`: every link's quote looked for in its evidence, one evidence at a time
    (read, normalized off the event loop by `run`, then let go), so memory stays bounded by
    the largest document, not by how many the batch quotes. Each found quote comes back with
    its anchor."""
    own = batch_texts(batch)
    slugs = collections(batch)
    found: dict[EventId, Verdict] = {}
    for evidence_id, quoted in quotes_by_evidence(batch).items():
        text = own.get(evidence_id)
        if text is None:
            text = await conn.fetchval(SQL_TEXT, evidence_id, slugs)
        if text is not None:
            found.update(await run(quotes_found, text, quoted))
    return found
