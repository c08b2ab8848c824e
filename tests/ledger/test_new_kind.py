"""A new kind is one entry in `tms.rules.kinds.KINDS` plus the migration that makes its typed
table: nothing else changes, whatever sort of kind it is. A throw-away kind (4790, a note about a
claim) is registered here, its migration applied the way `migrate` applies every other, and it
flows through publish (its content model, its reference checked), its typed table, the
transparency log, export and `verify-export`; a note naming something that is not a claim is
refused in its entry's words. More sorts follow, each with only its entry and its migration: a
kind of no collection (welcome on a collection's relay, no log entry), a kind that adds to each
collection's and each claim's counts (new count columns), a kind never stored, and a kind
searched as claims are (its vectors queued, the relay's NIP-50 search finding it)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import MEMBER, OWNER, claim, evidence, signed
from publishing import join, open_collection, publish, readable, reader_of, refused

from tms.cli.verify_export import run
from tms.ledger.read.export import Exporter
from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.rules.content import CollectionSlug, EventIdField, NonBlank, Strict
from tms.rules.kinds import (
    KINDS,
    Embedding,
    Kind,
    Reference,
    Table,
    searchable_kinds,
    unscoped_kinds,
)
from tms.search.search import Search
from tms.store.database import Migration, load_migrations, migrate
from tms.tlog.audit import audit
from tms.tlog.export_lines import read_line
from tms.types import KIND_CLAIM, UNSCOPED

pytestmark = pytest.mark.anyio

KIND_NOTE = 4790


class Note(Strict):
    collection: CollectionSlug
    text: NonBlank
    about: EventIdField


NOTE = Kind(
    KIND_NOTE,
    "note",
    "notes",
    Note,
    references=(
        Reference(
            "about", "about", frozenset({KIND_CLAIM}), "about must be a claim; {id} is {a_kind}"
        ),
    ),
    tables=(Table("notes", "id collection pubkey text about"),),
    rows=lambda e, c: [("notes", (e.id, c.collection, e.pubkey, c.text, c.about))],
)

# The one migration a new kind brings: its typed table, append-only like every ledger table, and
# shaped as sql/015 left the others, so that Citus can place it beside its collection's events
# (`tms.store.citus.placement`: a registered kind's table needs no entry of its own): the
# collection as plain "C"-collated text, checked as the `slug` domain checks it, in its key.
MIGRATION = """
CREATE TABLE notes (
    id          text NOT NULL,
    seq         bigint NOT NULL,
    collection  text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    pubkey      text NOT NULL,
    text        text NOT NULL,
    about       text NOT NULL,
    PRIMARY KEY (id, collection)
);
CREATE TRIGGER notes_append_only BEFORE UPDATE OR DELETE ON notes
    FOR EACH ROW EXECUTE FUNCTION tms_refuse_change();
CREATE TRIGGER notes_no_truncate BEFORE TRUNCATE ON notes
    FOR EACH STATEMENT EXECUTE FUNCTION tms_refuse_change();
"""


@pytest.fixture
def note_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[Kind]:
    monkeypatch.setitem(KINDS, KIND_NOTE, NOTE)
    yield NOTE


async def test_a_registered_kind_flows_through_publish_log_export_and_verify(
    ledger: Ledger, note_kind: Kind, tmp_path: Path
) -> None:
    async with ledger.pool.acquire() as conn:
        applied = await migrate(
            conn, [*load_migrations(), Migration(990, "990_notes.sql", MIGRATION)]
        )
    assert applied == ["990_notes.sql"]
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    premise = claim(MEMBER, "lab", "DAO explains HIT.")
    note = signed(
        MEMBER,
        KIND_NOTE,
        {"collection": "lab", "text": "Check the 2019 cohort.", "about": premise["id"]},
    )
    result = await publish(ledger, premise, note)
    assert result["accepted"] == [premise["id"], note["id"]]

    async with ledger.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT seq, collection, text, about FROM notes WHERE id = $1", note["id"]
        )
        seq = await conn.fetchval("SELECT seq FROM events WHERE id = $1", note["id"])
        leaf = await conn.fetchval(
            "SELECT idx FROM tlog_leaves WHERE event_id = $1", bytes.fromhex(note["id"])
        )
    assert dict(row) == {
        "seq": seq,
        "collection": "lab",
        "text": "Check the 2019 cohort.",
        "about": premise["id"],
    }
    assert leaf is not None  # an entry of the collection's log
    read = await Reads(ledger.pool).get_event(
        await reader_of(Reads(ledger.pool), MEMBER.pubkey), note["id"]
    )
    assert read is not None and (read["kind"], read["kind_name"]) == (KIND_NOTE, "note")
    cited = await Reads(ledger.pool).cited(await readable(Reads(ledger.pool), "lab"), [note["id"]])
    assert cited[note["id"]].kind == KIND_NOTE  # a proof may rest on it

    lines = [
        line
        async for line in Exporter(ledger.pool).lines(
            await readable(Exporter(ledger.pool), "lab"), checkpoint=True
        )
    ]
    assert any(f'"id":"{note["id"]}"' in line for line in lines)
    report = audit(
        [read_line(n, line.encode()) for n, line in enumerate(lines, start=1)],
        ledger.log.signer.key.verifier(),
        [],
    )
    assert report.ok, report.problems
    assert report.entries == 3  # the member list, the claim and the note
    # and the command a member runs, on the file
    path = tmp_path / "lab.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    out = io.StringIO()
    key = ledger.log.signer.key.verifier().encode()
    assert await asyncio.to_thread(run, str(path), None, key, out) == 0, out.getvalue()
    assert out.getvalue().endswith("3 log entries of 'lab': OK\n")


async def test_its_reference_is_checked_in_its_entry_words(ledger: Ledger, note_kind: Kind) -> None:
    async with ledger.pool.acquire() as conn:
        await migrate(conn, [*load_migrations(), Migration(990, "990_notes.sql", MIGRATION)])
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", "A document.")
    await publish(ledger, doc)
    wrong = signed(MEMBER, KIND_NOTE, {"collection": "lab", "text": "x", "about": doc["id"]})
    await refused(ledger, [wrong], f"about must be a claim; {doc['id']} is an evidence", position=0)
    missing = signed(MEMBER, KIND_NOTE, {"collection": "lab", "text": "x", "about": "0" * 64})
    await refused(
        ledger, [missing], f"about {'0' * 64} does not exist in collection 'lab'", position=0
    )


# --- the other sorts: each its entry and its migration alone -------------------------------------

KIND_BADGE, KIND_REVIEW, KIND_PING, KIND_QUESTION = 4791, 4792, 4793, 4794


class Badge(Strict):
    label: NonBlank


class Review(Strict):
    collection: CollectionSlug
    about: EventIdField
    verdict: NonBlank


class Ping(Strict):
    text: NonBlank


class Question(Strict):
    collection: CollectionSlug
    text: NonBlank


BADGE = Kind(  # of no collection, as profiles and terms are
    KIND_BADGE,
    "badge",
    "badges",
    Badge,
    scoped=False,
    tables=(Table("badges", "id pubkey label"),),
    rows=lambda e, c: [("badges", (e.id, e.pubkey, c.label))],
)
REVIEW = Kind(  # counted in its collection's counts and in its claim's
    KIND_REVIEW,
    "review",
    "reviews",
    Review,
    references=(
        Reference(
            "about", "about", frozenset({KIND_CLAIM}), "about must be a claim; {id} is {a_kind}"
        ),
    ),
    tables=(Table("reviews", "id collection pubkey about verdict"),),
    rows=lambda e, c: [("reviews", (e.id, c.collection, e.pubkey, c.about, c.verdict))],
    counted="reviews",
    claim_counts=lambda event_id, c: [(c.about, "reviewed")],
    claim_columns=("reviewed",),
)
PING = Kind(KIND_PING, "ping", "pings", Ping, scoped=False, stored=False)  # never stored
QUESTION = Kind(  # searched by meaning or by keywords, as claims are
    KIND_QUESTION,
    "question",
    "questions",
    Question,
    tables=(Table("questions", "id collection pubkey text"),),
    rows=lambda e, c: [("questions", (e.id, c.collection, e.pubkey, c.text))],
    embedding=Embedding("questions", "text"),
)

SORTS_MIGRATION = """
CREATE TABLE badges (
    id      text NOT NULL,
    seq     bigint NOT NULL,
    pubkey  text NOT NULL,
    label   text NOT NULL,
    PRIMARY KEY (id)
);
CREATE TABLE reviews (
    id          text NOT NULL,
    seq         bigint NOT NULL,
    collection  text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    pubkey      text NOT NULL,
    about       text NOT NULL,
    verdict     text NOT NULL,
    PRIMARY KEY (id, collection)
);
CREATE TABLE questions (
    id          text NOT NULL,
    seq         bigint NOT NULL,
    collection  text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    pubkey      text NOT NULL,
    text        text NOT NULL,
    PRIMARY KEY (id, collection)
);
ALTER TABLE collection_counts ADD COLUMN reviews bigint NOT NULL DEFAULT 0;
ALTER TABLE claim_counts ADD COLUMN reviewed int NOT NULL DEFAULT 0;
"""


@pytest.fixture
def other_sorts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for kind in (BADGE, REVIEW, PING, QUESTION):
        monkeypatch.setitem(KINDS, kind.number, kind)
    yield


async def test_each_sort_of_kind_needs_its_entry_and_its_migration_only(
    ledger: Ledger, other_sorts: None
) -> None:
    async with ledger.pool.acquire() as conn:
        await migrate(conn, [*load_migrations(), Migration(991, "991_sorts.sql", SORTS_MIGRATION)])
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    premise = claim(MEMBER, "lab", "DAO explains HIT.")
    review = signed(
        MEMBER, KIND_REVIEW, {"collection": "lab", "about": premise["id"], "verdict": "sound"}
    )
    badge = signed(MEMBER, KIND_BADGE, {"label": "reviewer"})
    # on a collection's relay, a kind of no collection is welcome as profiles and terms are
    result = await ledger.submit([premise, review, badge], origin=OPERATOR, within="lab")
    assert result["accepted"] == [premise["id"], review["id"], badge["id"]]
    assert KIND_BADGE in unscoped_kinds()
    async with ledger.pool.acquire() as conn:
        filed = await conn.fetchval("SELECT collection FROM events WHERE id = $1", badge["id"])
        entries = await conn.fetchval(
            "SELECT count(*) FROM tlog_leaves WHERE event_id = ANY($1::bytea[])",
            [bytes.fromhex(e["id"]) for e in (premise, review, badge)],
        )
        reviews = await conn.fetchval(
            "SELECT reviews FROM collection_counts WHERE collection = 'lab'"
        )
        reviewed = await conn.fetchval(
            "SELECT reviewed FROM claim_counts WHERE claim_id = $1", premise["id"]
        )
    assert filed == UNSCOPED and entries == 2  # the badge is no log's entry
    assert (reviews, reviewed) == (1, 1)
    ping = signed(MEMBER, KIND_PING, {"text": "hello"})
    await refused(ledger, [ping], "kind 4793 (ping) events are never stored", position=0)
    # a searchable kind: queued for its vectors, and found by the relay's NIP-50 search
    asked = signed(MEMBER, KIND_QUESTION, {"collection": "lab", "text": "Why the 2019 cohort?"})
    await publish(ledger, asked)
    assert KIND_QUESTION in searchable_kinds()
    queued = await ledger.pool.fetchval(
        "SELECT count(*) FROM embedding_queue WHERE event_id = $1", asked["id"]
    )
    search = Search(ledger.pool, None)  # no model: by keyword
    found = await search.events(await readable(search, "lab"), KIND_QUESTION, "cohort", 10)
    assert queued == 1 and [event_id for _, event_id in found] == [asked["id"]]
