"""What each tool takes and returns, as pydantic models: the source of `tools/list`'s
`inputSchema` and `outputSchema`, and of the argument checks.

Arguments are strict (a string is not a number, unknown fields are refused) and their limits are
SPEC's. Results are the typed dicts of `tms.results`, which the services build; their schemas
are derived here, and a test checks every result against its published schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from tms.ledger import DEFAULT_WINDOW
from tms.rules.content import CollectionSlug, EventIdField, NonBlank
from tms.tlog.note import MAX_TREE_SIZE
from tms.types import MAX_EVIDENCE_LIMIT, MAX_LIMIT, MAX_LINKS_LIMIT, MAX_QUERY_CHARS

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
    proof: bool = Field(
        False,
        description="Also return `proof`: the event's leaf index in its collection's "
        "transparency log and its inclusion proof against the latest checkpoint.",
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


class GetCheckpointArgs(_Args):
    collection: Collection


class GetConsistencyArgs(_Args):
    collection: Collection
    old_size: int = Field(ge=0, le=MAX_TREE_SIZE, description="The size of the older log.")
    new_size: int | None = Field(
        None,
        ge=0,
        le=MAX_TREE_SIZE,
        description="The size of the newer log (default: the latest checkpoint's).",
    )


class GetReceiptArgs(_Args):
    collection: Collection
    id: EventIdField = Field(description="The event id (64 lowercase hex).")


class FetchUrlArgs(_Args):
    url: NonBlank = Field(description="An http(s) URL on the public internet.")


# --- results ---------------------------------------------------------------------------------


def output_schema(name: str, result: Any, *, wrapped: bool) -> dict[str, Any]:
    """`outputSchema` for a tool whose result has this type (a typed dict of tms.results, or a
    list or nullable value of them, sent as {"result": ...})."""
    if not wrapped:
        return TypeAdapter(result).json_schema(mode="serialization")
    model = create_model(_title(name), result=(result, ...))
    return model.model_json_schema(mode="serialization")


def _title(name: str) -> str:
    return "".join(part.title() for part in name.split("_")) + "Result"
