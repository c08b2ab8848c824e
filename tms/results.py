"""Every result shape a user receives, defined once.

The ledger, search, fetcher and proof checker build these dicts; the MCP server publishes their
JSON Schemas as `outputSchema` (`tms.mcp.schemas`), and every other door reads the same keys. Typed
dicts rather than models: results are built per row on hot paths, where a dict costs nothing and
mypy still checks every key. SPEC's "What each tool returns" table is the contract.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict


class AnchorInfo(TypedDict):
    """Where a link's quote sits in its evidence: W3C's TextPositionSelector (`start`, `end`)
    and TextQuoteSelector (`exact`, `prefix`, `suffix`)."""

    start: Annotated[
        int,
        Field(
            description="Where the quote starts in the evidence text, in code points of the "
            "text as signed (as get_event's `offset` counts), not of its normalized form."
        ),
    ]
    end: Annotated[int, Field(description="Where it ends (exclusive), counted the same way.")]
    exact: Annotated[str, Field(description="The evidence's characters from `start` to `end`.")]
    prefix: Annotated[str, Field(description="Up to 32 characters before `start`.")]
    suffix: Annotated[str, Field(description="Up to 32 characters after `end`.")]
    occurrences: Annotated[
        int,
        Field(
            description="How many times the normalized quote occurs in the normalized text "
            "(without overlaps); the anchor is the first."
        ),
    ]


_ANCHOR = Annotated[
    AnchorInfo | None,
    Field(description="Where the quote sits in its evidence; null until it is computed."),
]

_DISPUTED_BY = Annotated[
    list[str],
    Field(
        description="The ids of the REBUTS links aimed at this link (its disputes): the first "
        "10, oldest first; empty when none is. get_links with `to_id` set to this link's id "
        "lists them all."
    ),
]

# `from` is a Python keyword, so a link is spelled in the functional form.
LinkInfo = TypedDict(
    "LinkInfo",
    {
        "id": str,
        "pubkey": str,
        "author": str | None,
        "from": str,
        "to": str,
        "relation": str,
        "quote": str,
        "reason": str,
        "received_at": str,
        "anchor": NotRequired[_ANCHOR],  # get_links only
        "disputed_by": NotRequired[_DISPUTED_BY],  # get_links only
    },
)


class CheckpointInfo(TypedDict):
    collection: str
    origin: Annotated[str, Field(description="The log's name: <host>/c/<slug>.")]
    size: Annotated[
        int, Field(description="Entries in the log: the collection's events (not profiles, terms).")
    ]
    root: Annotated[str, Field(description="The RFC 6962 root hash at that size, base64.")]
    note: Annotated[
        str,
        Field(
            description="The checkpoint as a C2SP signed note (tlog-checkpoint), signed by the "
            "server's key (GET /log-key): keep it, and check later exports against it. "
            "With witnesses, it also carries their cosignatures (C2SP tlog-cosignature)."
        ),
    ]
    witnessed_by: NotRequired[
        Annotated[
            list[str],
            Field(
                description="The witnesses of this server's policy (TMS_WITNESS_POLICY) whose "
                "cosignatures the note carries, by the policy's names."
            ),
        ]
    ]
    quorum: NotRequired[
        Annotated[
            bool | None,
            Field(
                description="Whether they make the policy's quorum; null when the server "
                "names no witnesses. Check it yourself with your own policy: tms "
                "verify-export --policy."
            ),
        ]
    ]


class InclusionProof(TypedDict):
    leaf_index: Annotated[int, Field(description="The event's place in its collection's log.")]
    tree_size: int
    hashes: Annotated[
        list[str], Field(description="The RFC 9162 inclusion path, from the leaf up, base64.")
    ]
    checkpoint: Annotated[CheckpointInfo, Field(description="The checkpoint it proves against.")]


class ReceiptInfo(TypedDict):
    collection: str
    event_id: str
    leaf_index: Annotated[int, Field(description="The event's place in its collection's log.")]
    tree_size: Annotated[int, Field(description="The size of the checkpoint it proves against.")]
    witnessed_by: Annotated[
        list[str],
        Field(
            description="The witnesses of this server's policy whose cosignatures that "
            "checkpoint carries, by the policy's names."
        ),
    ]
    quorum: Annotated[
        bool | None,
        Field(
            description="Whether they make the policy's quorum; null when the server names no "
            "witnesses."
        ),
    ]
    receipt: Annotated[
        str,
        Field(
            description="The receipt, a C2SP tlog-proof (c2sp.org/tlog-proof@v1): the event "
            "as extra data, its index, its inclusion path and the signed (and cosigned) "
            "checkpoint. Save it as <name>.tlog-proof and check it offline: tms "
            "verify-receipt <event id> <file> --key <log key> [--policy <file>]."
        ),
    ]


class ConsistencyProof(TypedDict):
    collection: str
    old_size: int
    new_size: int
    hashes: Annotated[
        list[str],
        Field(description="The RFC 9162 consistency proof from old_size to new_size, base64."),
    ]
    checkpoint: Annotated[
        CheckpointInfo | None,
        Field(description="The server's signed checkpoint at new_size, if it signed one."),
    ]


class PublishResult(TypedDict):
    accepted: list[str]
    skipped: Annotated[list[str], Field(description="Ids already stored, so not stored again.")]
    collections: list[str]
    superseded: NotRequired[
        Annotated[
            list[str],
            Field(
                description="Present when some are: member lists and profiles stored by this "
                "call that are not current, because a newer one stands (newest created_at "
                "wins, ties to the lowest id)."
            ),
        ]
    ]
    embedded: NotRequired[Annotated[int, Field(description="Vectors this call computed.")]]
    embedding_error: NotRequired[
        Annotated[
            str,
            Field(description="Instead of `embedded` when embedding failed; events are stored."),
        ]
    ]
    checkpoints: Annotated[
        list[CheckpointInfo],
        Field(description="Each collection written: its log's new signed checkpoint."),
    ]


class FetchResult(TypedDict):
    url: Annotated[str, Field(description="The final URL, after redirects.")]
    title: str
    chars: int
    text: str


class TermsInfo(TypedDict):
    version: str
    sha256: str
    text: str


class CollectionInfo(TypedDict):
    slug: str
    owner: str
    created_at: str
    members: list[str]
    evidence: int
    claims: int
    links: int
    contradictions: int


class EventInfo(TypedDict):
    id: str
    pubkey: str
    author: str | None
    kind: int
    kind_name: str
    collection: str | None
    created_at: int
    received_at: str
    content: dict[str, object]
    chars: NotRequired[Annotated[int, Field(description="Evidence only: the full text's length.")]]
    offset: NotRequired[
        Annotated[int, Field(description="Evidence only: where `content.text` starts.")]
    ]
    anchor: NotRequired[
        Annotated[
            AnchorInfo | None,
            Field(description="Links only: where the quote sits in its evidence, or null."),
        ]
    ]
    proof: NotRequired[
        Annotated[
            InclusionProof,
            Field(description="With `proof: true`: the event's place in its collection's log."),
        ]
    ]


class ClaimHit(TypedDict):
    id: str
    pubkey: str
    author: str | None
    text: str
    received_at: str
    distance: NotRequired[Annotated[float, Field(description="Vector search: cosine distance.")]]
    rank: NotRequired[Annotated[float, Field(description="Keyword search: ts_rank.")]]
    links: Annotated[
        list[LinkInfo], Field(description="Links to the claim; quotes cut to 300 chars.")
    ]
    contradiction_ids: list[str]


class SearchClaimsResult(TypedDict):
    method: Literal["vector", "keyword"]
    note: str | None
    items: list[ClaimHit]


class ClaimSummary(TypedDict):
    id: str
    pubkey: str
    author: str | None
    text: str
    received_at: str
    supports: int
    qualifies: int
    rebuts: int
    findings: Annotated[int, Field(description="Contradictions the claim belongs to.")]


class EvidenceSummary(TypedDict):
    id: str
    pubkey: str
    author: str | None
    title: str | None
    url: str | None
    source: str | None
    received_at: str
    chars: int
    link_count: int


class ClaimBrief(TypedDict):
    id: str
    pubkey: str
    author: str | None
    text: str


class ContradictionInfo(TypedDict):
    id: str
    pubkey: str
    author: str | None
    reason: str
    claim_ids: list[str]
    received_at: str
    claims: list[ClaimBrief]
    links: list[LinkInfo]
    distance: NotRequired[
        Annotated[float, Field(description="Text search by vector: cosine distance.")]
    ]
    rank: NotRequired[Annotated[float, Field(description="Text search by keyword: ts_rank.")]]


class Dispute(TypedDict):
    id: str
    reason: Annotated[str, Field(description="Its reason, cut to 200 characters.")]


class ContestedClaim(TypedDict):
    claim: Annotated[str, Field(description="The id of a claim the proof cites.")]
    rebuts: Annotated[
        list[Dispute],
        Field(description="REBUTS links pointing at it: the first 10, oldest first."),
    ]
    contradictions: Annotated[
        list[Dispute],
        Field(description="Contradictions naming it: the first 10, oldest first."),
    ]


class DisputedLink(TypedDict):
    link: Annotated[str, Field(description="The id of a link the proof cites.")]
    rebuts: Annotated[
        list[Dispute],
        Field(description="REBUTS links aimed at it: the first 10, oldest first."),
    ]


class ProofResult(TypedDict):
    ok: bool
    problems: list[str]
    root: str | None
    tree: str
    contested: Annotated[
        list[ContestedClaim],
        Field(
            description="The claims the proof cites that a REBUTS link in the collection "
            "targets or a contradiction in it names, first cited first; `ok` does not "
            "depend on it."
        ),
    ]
    disputed_links: Annotated[
        list[DisputedLink],
        Field(
            description="The links the proof cites that a REBUTS link in the collection "
            "targets (a disputed premise: the support or rebuttal it rests on is itself "
            "disputed), first cited first; `ok` does not depend on it."
        ),
    ]


# --- what the pages read beside the tools' results (tms.ledger.read.keys, tms.ledger.read.stats)
# ---------


class ProfileInfo(TypedDict):
    id: str
    pubkey: str
    created_at: int
    name: str
    about: str | None
    content: str  # the signed content, exactly (JSON)
    tags: str  # the signed tags, as compact JSON


class MemberListInfo(TypedDict):
    collection: str
    owner: str
    members: Annotated[list[str], Field(description="The current list's keys, as signed.")]
    list_id: Annotated[str | None, Field(description="The current list's id; null: none yet.")]
    list_created_at: Annotated[int | None, Field(description="Its created_at, the rule's key.")]


class ActivityBucket(TypedDict):
    start: Annotated[str, Field(description="The bucket's first day, ISO 8601 (UTC).")]
    events: int


class Activity(TypedDict):
    unit: Literal["day", "week", "month"]
    buckets: Annotated[list[ActivityBucket], Field(description="Oldest first, empty ones too.")]


class KindCount(TypedDict):
    kind: int
    kind_name: str
    events: int


class Contributor(TypedDict):
    pubkey: str
    author: str | None
    events: int


class SourceCount(TypedDict):
    source: Annotated[str, Field(description="An evidence `source` value, or a URL's host.")]
    evidence: int


class DashboardStats(TypedDict):
    activity: Activity
    kinds: list[KindCount]
    contributors: list[Contributor]
    sources: list[SourceCount]
    domains: list[SourceCount]
