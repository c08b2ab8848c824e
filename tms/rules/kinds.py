"""Every event kind, one entry each: its content schema (a strict pydantic model, as SPEC's
table of kinds defines it, which the guide repeats) and what the rest of the ledger needs to know
of it: the events it references and how, its typed tables, whether it is embedded for search,
counted, an entry of its collection's transparency log, and the name people and bots see.
Everything else reads `KINDS`, so a new kind is its model and its entry here, plus the migration
that makes its table. `KINDS` is a registry (`tms.registry`): a number taken twice is refused at
import, and each entry's functions are typed over its content model (`Kind[C]`).

What content is made of, and how its errors are phrased: `tms.rules.content`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tms.errors import InvalidEvent
from tms.nostr.events import Event
from tms.registry import Keyed
from tms.rules.content import (
    DISTINCT,
    CollectionSlug,
    EventIdField,
    NonBlank,
    PubKeyField,
    Sha256Field,
    Strict,
    parse_object,
    translate_error,
)
from tms.rules.membership import MemberChange, MemberRequest, code_hash, parse_change, parse_request
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_JOIN,
    KIND_LEAVE,
    KIND_LINK,
    KIND_MEMBER_CHANGE,
    KIND_MEMBERS,
    KIND_PROFILE,
    KIND_REQUEST,
    KIND_TERMS,
    EventId,
)


class Profile(BaseModel):
    """Kind 0. Other Nostr clients add their own fields, so unknown ones are kept, not refused."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    name: NonBlank
    about: str | None = None
    picture: str | None = None


class Evidence(Strict):
    collection: CollectionSlug
    text: NonBlank
    url: str | None = None
    title: str | None = None
    source: str | None = None


class Claim(Strict):
    collection: CollectionSlug
    text: NonBlank


class Link(Strict):
    collection: CollectionSlug
    from_: EventIdField = Field(alias="from")
    to: EventIdField
    relation: Literal["SUPPORTS", "REBUTS", "QUALIFIES"]
    quote: NonBlank
    reason: NonBlank


class Contradiction(Strict):
    collection: CollectionSlug
    claims: Annotated[list[EventIdField], Field(min_length=2), DISTINCT]
    reason: NonBlank


class Members(Strict):
    collection: CollectionSlug
    members: Annotated[list[PubKeyField], DISTINCT]


class Terms(Strict):
    version: NonBlank
    sha256: Sha256Field


class Request(Strict):
    tool: NonBlank
    args: dict[str, Any]


Content = BaseModel  # any kind's content model

# --- the registry ------------------------------------------------------------------------------

Columns = tuple[tuple[str, str], ...]  # a typed table's columns but `seq`: (name, SQL type)
Row = tuple[str, tuple[Any, ...]]  # (typed table, its values in its columns' order)
ClaimCount = tuple[EventId, str | None]  # (claim id, claim_counts column it adds one to, or none)


@dataclass(frozen=True, slots=True)
class Reference:
    """A content field naming events of the same collection (a link's `from` and `to`, a
    contradiction's claims): the publish rules check that each is an event of `kinds`, stored
    in the collection or earlier in the batch, and `tms verify-export` that each is earlier in
    the file. `wrong` is the refusal for an event of another kind (format keys: `id`,
    `a_kind`, `slug`)."""

    key: str  # the field as signed: "from", "to", "claims"
    role: str  # a missing one is "<role> <id> does not exist in collection '<slug>'"
    kinds: frozenset[int]
    wrong: str

    def ids(self, content: BaseModel) -> list[EventId]:
        """The ids a validated content names here."""
        value = getattr(content, _attribute(type(content), self.key))
        return list(value) if isinstance(value, list) else [value]

    def raw_ids(self, content: Mapping[str, object]) -> tuple[str, ...]:
        """The ids a content object names here as it was read, unvalidated (an exported
        line): its strings only."""
        value = content.get(self.key)
        return tuple(
            v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)
        )


@functools.cache
def _attribute(model: type[BaseModel], key: str) -> str:
    """The model's attribute for a field as signed (`from` is the attribute `from_`)."""
    for name, info in model.model_fields.items():
        if (info.alias or name) == key:
            return name
    raise KeyError(f"{model.__name__} has no field {key!r}")


@dataclass(frozen=True, slots=True)
class Table:
    """A typed table a kind's rows go to, in the publish's one statement. `words` names its
    columns but `seq`, in its rows' order, each `name` (text) or `name:type`."""

    name: str
    words: str
    sequenced: bool = True  # its second column is `seq`, the event's, joined from the insert

    @property
    def columns(self) -> Columns:
        pairs = (word.partition(":") for word in self.words.split())
        return tuple((name, sql_type or "text") for name, _, sql_type in pairs)


@dataclass(frozen=True, slots=True)
class Embedding:
    """Searchable by meaning: the typed table and columns its vector is computed from."""

    table: str
    text: str
    title: str | None = None
    at_publish: bool = True  # a publish waits for it (search reads it); else in the background


C = TypeVar("C", bound=BaseModel)  # a kind's content model


@dataclass(frozen=True, slots=True)
class Kind(Generic[C]):
    """One event kind, as every layer needs it; its functions read its content as its model,
    `C`."""

    number: int
    name: str  # `kind_name` in results; refusals and pages say it
    plural: str  # for counts: "3 claims"
    model: type[C]
    scoped: bool = True  # names a collection: stored in it, exported with it, a log entry
    stored: bool = True  # requests are signed, checked and never stored
    tags: bool = False  # may carry tags (profiles, which other clients tag)
    references: tuple[Reference, ...] = ()
    tables: tuple[Table, ...] = ()
    rows: Callable[[Event, C], list[Row]] | None = None  # its typed rows, per `tables`
    embedding: Embedding | None = None
    counted: str | None = None  # its column in each collection's counts (sql/009)
    claim_counts: Callable[[EventId, C], list[ClaimCount]] | None = None  # sql/008
    claim_columns: tuple[str, ...] = ()  # the claim_counts columns `claim_counts` adds to


def _row(table: str, *values: Any) -> list[Row]:
    return [(table, values)]


_LINK_TARGETS: Final = frozenset({KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION, KIND_EVIDENCE})


class Kinds(Keyed[int, "Kind[Any]"]):
    """The kinds' registry: each kind under its number, registered once (`add`); a number taken
    twice is a `Collision`, as in every other registry (`tms.registry`)."""

    def add(self, kind: Kind[C]) -> Kind[C]:
        """Register `kind` under its number; its functions stay typed over its model."""
        self.register(kind.number, kind)
        return kind

    def __setitem__(self, number: int, kind: Kind[Any]) -> None:
        """`KINDS[n] = kind`: `add`, for a kind numbered `n` (a test's throw-away kind, as
        pytest's `monkeypatch.setitem` registers it); a number taken raises `Collision`."""
        if number != kind.number:
            raise KeyError(f"kind {kind.number} registered under the number {number}")
        self.add(kind)

    def __delitem__(self, number: int) -> None:
        """Take a kind out again (what `monkeypatch.setitem` does when its test ends)."""
        del self._entries[number]
        del self._by[number]


KINDS: Final = Kinds("kind")

KINDS.add(
    Kind(
        KIND_PROFILE,
        "profile",
        "profiles",
        Profile,
        scoped=False,
        tags=True,
        tables=(Table("profiles", "id pubkey created_at:bigint name about picture"),),
        rows=lambda e, c: _row(
            "profiles", e.id, e.pubkey, e.created_at, c.name, c.about, c.picture
        ),
    )
)
KINDS.add(
    Kind(
        KIND_EVIDENCE,
        "evidence",
        "evidence",
        Evidence,
        tables=(Table("evidence", "id collection pubkey title url source text"),),
        rows=lambda e, c: _row(
            "evidence", e.id, c.collection, e.pubkey, c.title, c.url, c.source, c.text
        ),
        embedding=Embedding("evidence", "text", "title", at_publish=False),
        counted="evidence",
    )
)
KINDS.add(
    Kind(
        KIND_CLAIM,
        "claim",
        "claims",
        Claim,
        tables=(Table("claims", "id collection pubkey text"),),
        rows=lambda e, c: _row("claims", e.id, c.collection, e.pubkey, c.text),
        embedding=Embedding("claims", "text"),
        counted="claims",
        claim_counts=lambda event_id, c: [(event_id, None)],
    )
)
KINDS.add(
    Kind(
        KIND_LINK,
        "link",
        "links",
        Link,
        references=(
            Reference(
                "from",
                "from",
                frozenset({KIND_EVIDENCE}),
                "from must be an evidence event; {id} is {a_kind}",
            ),
            Reference(
                "to",
                "to",
                _LINK_TARGETS,
                "to must be a claim, link, contradiction or evidence; {id} is {a_kind} event",
            ),
        ),
        tables=(Table("links", "id collection pubkey from_id to_id relation quote reason"),),
        rows=lambda e, c: _row(
            "links", e.id, c.collection, e.pubkey, c.from_, c.to, c.relation, c.quote, c.reason
        ),
        counted="links",
        claim_counts=lambda event_id, c: [(c.to, c.relation.lower())],
        claim_columns=("supports", "qualifies", "rebuts"),
    )
)
KINDS.add(
    Kind(
        KIND_CONTRADICTION,
        "contradiction",
        "contradictions",
        Contradiction,
        references=(
            Reference(
                "claims",
                "claim",
                frozenset({KIND_CLAIM}),
                "{id} is not a claim in collection '{slug}'",
            ),
        ),
        tables=(
            Table("contradictions", "id collection pubkey reason"),
            Table("contradiction_claims", "contradiction_id claim_id collection", sequenced=False),
        ),
        rows=lambda e, c: [
            ("contradictions", (e.id, c.collection, e.pubkey, c.reason)),
            *(("contradiction_claims", (e.id, claim, c.collection)) for claim in c.claims),
        ],
        embedding=Embedding("contradictions", "reason"),
        counted="contradictions",
        claim_counts=lambda event_id, c: [(claim, "findings") for claim in c.claims],
        claim_columns=("findings",),
    )
)
KINDS.add(
    Kind(
        KIND_MEMBERS,
        "members",
        "member lists",
        Members,
        tables=(Table("member_lists", "id collection pubkey created_at:bigint members"),),
        rows=lambda e, c: _row(
            "member_lists", e.id, c.collection, e.pubkey, e.created_at, json.dumps(c.members)
        ),
    )
)
# Membership changes, invites, joins and leaves (sql/025, sql/026): `target` the key added or
# removed, or an invite's code hash; `claim` a join's code hash.
_MEMBER_CHANGES: Final = Table(
    "member_changes", "id collection pubkey created_at:bigint method target body claim"
)


def _member_change_row(e: Event, c: MemberChange | MemberRequest, claim: str | None) -> list[Row]:
    """A membership record's row: a change's, an invite's, a join's or a leave's."""
    return _row(
        "member_changes",
        e.id,
        c.collection,
        e.pubkey,
        e.created_at,
        c.method,
        c.pubkey,
        e.body,
        claim,
    )


KINDS.add(
    Kind(
        KIND_MEMBER_CHANGE,
        "membership",  # a membership change: refusals say "a membership"
        "membership changes",
        MemberChange,
        tags=True,  # a NIP-98 event: `u`, `method`, `payload`; read by `parse_change`
        tables=(_MEMBER_CHANGES,),
        rows=lambda e, c: _member_change_row(e, c, None),
    )
)
for _number, _name in ((KIND_JOIN, "join"), (KIND_LEAVE, "leave")):
    KINDS.add(
        Kind(
            _number,
            _name,  # NIP-43's join and leave requests, kept as membership records (sql/026)
            f"{_name}s",
            MemberRequest,
            tags=True,  # `-`, and a join's `claim`; read by `parse_request`
            tables=(_MEMBER_CHANGES,),
            rows=lambda e, c: _member_change_row(
                e, c, code_hash(c.code) if c.code is not None else None
            ),
        )
    )
KINDS.add(
    Kind(
        KIND_TERMS,
        "terms",
        "terms",
        Terms,
        scoped=False,
        tables=(Table("terms_signatures", "id pubkey version sha256"),),
        rows=lambda e, c: _row("terms_signatures", e.id, e.pubkey, c.version, c.sha256),
    )
)
KINDS.add(Kind(KIND_REQUEST, "request", "requests", Request, scoped=False, stored=False))


def kind_name(number: int) -> str:
    """What results and pages call a kind: its name, or "kind N" for one no entry knows."""
    kind = KINDS.get(number)
    return kind.name if kind is not None else f"kind {number}"


def a_kind(number: int) -> str:
    """'a claim', 'an evidence': a kind's name with its article, for refusals."""
    name = kind_name(number)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def embedded_kinds(*, at_publish: bool = False) -> dict[int, Embedding]:
    """The kinds searched by meaning (only those a publish waits for, with `at_publish`)."""
    return {
        number: kind.embedding
        for number, kind in sorted(KINDS.items())
        if kind.embedding is not None and (kind.embedding.at_publish or not at_publish)
    }


def collection_count_columns() -> tuple[str, ...]:
    """The columns of each collection's record counts (sql/009), one per counted kind, in the
    registry's order."""
    return tuple(dict.fromkeys(k.counted for k in KINDS.values() if k.counted is not None))


def claim_count_columns() -> tuple[str, ...]:
    """The columns of each claim's counts (sql/008) that kinds add to, in the registry's
    order."""
    return tuple(dict.fromkeys(c for k in KINDS.values() for c in k.claim_columns))


def unscoped_kinds() -> frozenset[int]:
    """The stored kinds that belong to no collection (profiles, terms): no log's entries."""
    return frozenset(n for n, kind in KINDS.items() if kind.stored and not kind.scoped)


def collection_of(kind: int, content: Content) -> str | None:
    """The collection an event of a known kind is filed in: its content's, or none for a kind
    of no collection (`Kind.scoped`)."""
    if not KINDS[kind].scoped:
        return None
    slug: str = getattr(content, "collection")  # noqa: B009 - every scoped kind's model has it
    return slug


def searchable_kinds() -> frozenset[int]:
    """The kinds search ranks (NIP-50 on the relay, the tools' and the pages' searches): those
    searched by meaning and at publish (claims, contradictions)."""
    return frozenset(embedded_kinds(at_publish=True))


def _known_kinds() -> str:
    return ", ".join(f"{n} ({kind.name})" for n, kind in sorted(KINDS.items()))


def validate_content(event: Event) -> Content:
    """Check an event's kind, tags and content against SPEC's table; return the typed content."""
    kind = KINDS.get(event.kind)
    if kind is None:
        raise InvalidEvent(
            f"field 'kind' is invalid: {event.kind} is not a TMS kind ({_known_kinds()})", "kind"
        )
    if event.tags and not kind.tags:
        raise InvalidEvent(
            f"tags must be [] on a {kind.name} event; only profiles carry tags", "tags"
        )
    if event.kind == KIND_MEMBER_CHANGE:
        return parse_change(event)
    if event.kind in (KIND_JOIN, KIND_LEAVE):
        return parse_request(event)
    return parse_content(event.kind, event.content)


def parse_content(kind: int, content: str) -> Content:
    """Parse a content string for a known kind (`validate_content` checks the kind first)."""
    model: type[BaseModel] = KINDS[kind].model
    name = KINDS[kind].name
    try:
        return model.model_validate(parse_object(name, content))
    except ValidationError as exc:
        raise translate_error(f"{name} content", exc) from None
