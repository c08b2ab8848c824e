"""What each tool takes and returns, as pydantic models: the source of `tools/list`'s
`inputSchema` and `outputSchema`, and of the argument checks.

Arguments are strict (a string is not a number, unknown fields are refused) and their limits are
SPEC's. Result models exist for the schemas only: the handlers build plain dicts in the same
shape, and a test checks every result against its published schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tms.rules.kinds import CollectionSlug, EventIdField, NonBlank

MAX_LIMIT = 200
MAX_EVIDENCE_LIMIT = 500
MAX_LINKS_LIMIT = 1000
DEFAULT_WINDOW = 20_000
MAX_QUERY_CHARS = 10_000

Collection = Annotated[CollectionSlug, Field(description="The collection's slug.")]
Query = Annotated[NonBlank, Field(max_length=MAX_QUERY_CHARS)]


def _limit(default: int, maximum: int) -> Any:
    return Field(default, ge=1, le=maximum, description=f"At most this many (1-{maximum}).")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- arguments ---------------------------------------------------------------------------------


class PublishArgs(_Args):
    events: list[Any] = Field(
        description="Signed events (NIP-01 envelopes), 1 to 1000, stored all or nothing."
    )


class NoArgs(_Args):
    pass


class GetEventArgs(_Args):
    id: EventIdField = Field(description="The event id (64 lowercase hex).")
    offset: int = Field(0, ge=0, description="Evidence only: first character of the window.")
    max_chars: int = Field(
        DEFAULT_WINDOW,
        ge=1,
        le=2_000_000,
        description=f"Evidence only: window length in characters (default {DEFAULT_WINDOW:,}).",
    )


class SearchClaimsArgs(_Args):
    collection: Collection
    text: Query = Field(description="What to look for: a sentence, or keywords.")
    method: Literal["vector", "keyword"] = Field(
        "vector",
        description="`vector` (meaning, the default) or `keyword` (PostgreSQL web-search syntax: "
        'words, "quoted phrases", or, -excluded).',
    )
    limit: int = _limit(20, MAX_LIMIT)


class ListClaimsArgs(_Args):
    collection: Collection
    sort: Literal["recent", "links", "unsupported", "unchallenged", "contested"] = Field(
        "recent", description="Order; see the tool description. Default `recent`."
    )
    limit: int = _limit(50, MAX_LIMIT)


class GetLinksArgs(_Args):
    collection: Collection
    to_id: EventIdField | None = Field(None, description="Only links pointing at this event.")
    from_id: EventIdField | None = Field(None, description="Only links quoting this evidence.")
    relation: Literal["SUPPORTS", "REBUTS", "QUALIFIES"] | None = Field(
        None, description="Only links of this relation."
    )
    limit: int = _limit(100, MAX_LINKS_LIMIT)


class ListEvidenceArgs(_Args):
    collection: Collection
    ungrounded_only: bool = Field(False, description="Only evidence no link quotes yet.")
    source: str | None = Field(None, description="Only evidence whose `source` is exactly this.")
    limit: int = _limit(100, MAX_EVIDENCE_LIMIT)


class SearchContradictionsArgs(_Args):
    collection: Collection
    claim: EventIdField | None = Field(None, description="Contradictions including this claim.")
    text: Query | None = Field(None, description="Search their reasons and claims' texts.")
    limit: int = _limit(20, MAX_LIMIT)


class CheckProofArgs(_Args):
    collection: Collection
    proof: Any = Field(
        description='The proof: {"question", "steps": [{"id", "say", "from": [...], "gap"?}]}.'
    )


class FetchUrlArgs(_Args):
    url: NonBlank = Field(description="An http(s) URL on the public internet.")


# --- results -----------------------------------------------------------------------------------


class _Result(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class PublishResult(_Result):
    accepted: list[str]
    skipped: list[str] = Field(description="Ids already stored, so not stored again.")
    collections: list[str]
    embedded: int | None = Field(None, description="Vectors this call computed.")
    embedding_error: str | None = Field(
        None, description="Instead of `embedded` when embedding failed; events are stored."
    )


class FetchResult(_Result):
    url: str = Field(description="The final URL, after redirects.")
    title: str
    chars: int
    text: str


class CollectionInfo(_Result):
    slug: str
    owner: str
    created_at: str
    members: list[str]
    evidence: int
    claims: int
    links: int
    contradictions: int


class LinkInfo(_Result):
    id: str
    pubkey: str
    author: str | None
    from_: str = Field(alias="from")
    to: str
    relation: str
    quote: str
    reason: str
    received_at: str


class EventInfo(_Result):
    id: str
    pubkey: str
    author: str | None
    kind: int
    kind_name: str
    collection: str | None
    created_at: int
    received_at: str
    content: dict[str, Any]
    chars: int | None = Field(None, description="Evidence only: the full text's length.")
    offset: int | None = Field(None, description="Evidence only: where `content.text` starts.")


class ClaimHit(_Result):
    id: str
    pubkey: str
    author: str | None
    text: str
    received_at: str
    distance: float | None = Field(None, description="Vector search: cosine distance.")
    rank: float | None = Field(None, description="Keyword search: ts_rank.")
    links: list[LinkInfo] = Field(description="Links to the claim; quotes cut to 300 chars.")
    contradiction_ids: list[str]


class SearchClaimsResult(_Result):
    method: Literal["vector", "keyword"]
    note: str | None
    items: list[ClaimHit]


class ClaimSummary(_Result):
    id: str
    pubkey: str
    author: str | None
    text: str
    received_at: str
    supports: int
    qualifies: int
    rebuts: int
    findings: int = Field(description="Contradictions the claim belongs to.")


class EvidenceSummary(_Result):
    id: str
    pubkey: str
    author: str | None
    title: str | None
    url: str | None
    source: str | None
    received_at: str
    chars: int
    link_count: int


class ClaimBrief(_Result):
    id: str
    pubkey: str
    author: str | None
    text: str


class ContradictionInfo(_Result):
    id: str
    pubkey: str
    author: str | None
    reason: str
    claim_ids: list[str]
    received_at: str
    claims: list[ClaimBrief]
    links: list[LinkInfo]
    distance: float | None = Field(None, description="Text search by vector: cosine distance.")
    rank: float | None = Field(None, description="Text search by keyword: ts_rank.")


class ProofResult(_Result):
    ok: bool
    problems: list[str]
    root: str | None
    tree: str


class CollectionList(_Result):
    result: list[CollectionInfo]


class EventOrNull(_Result):
    result: EventInfo | None


class ClaimList(_Result):
    result: list[ClaimSummary]


class LinkList(_Result):
    result: list[LinkInfo]


class EvidenceList(_Result):
    result: list[EvidenceSummary]


class ContradictionList(_Result):
    result: list[ContradictionInfo]
