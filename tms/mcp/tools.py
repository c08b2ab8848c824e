"""The tools agents call, independent of transport: MCP over HTTP and over stdio both call
`Tools.call`, which checks the signed request, the arguments and the caller's access, then asks
the ledger service.

A key reads only collections it owns or belongs to. A collection outside them, and one that does
not exist, get the same refusal; an event outside them is the same `null` as a missing one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from tms.errors import TMSError
from tms.fetch.client import fetch_url
from tms.ledger.reads import Reads
from tms.ledger.request_log import RequestLog
from tms.ledger.service import Ledger
from tms.mcp import schemas as s
from tms.nostr.events import SecretKey, compact_json
from tms.rules.kinds import translate_error
from tms.rules.proofs import check_proof, cited_event_ids
from tms.rules.requests import check_request, request_from_arguments
from tms.search.vectors import Vectors
from tms.types import KIND_REQUEST, PubKey, Slug

log = logging.getLogger("tms.mcp.tools")

A = TypeVar("A", bound=BaseModel)


class ToolError(TMSError):
    """A tool call refused; the message is shown to the caller as it is."""


@dataclass(frozen=True, slots=True)
class Services:
    ledger: Ledger
    reads: Reads
    requests: RequestLog
    vectors: Vectors | None  # None: TMS_EMBED=off, keyword search only
    fetch_allow: str | None = None  # TMS_FETCH_ALLOW's format; None reads the variable


Handler = Callable[[Services, PubKey, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    result: type[BaseModel]  # the outputSchema; a model with one `result` field means wrapped
    run: Handler
    signed: bool = True  # every tool but publish takes a signed request

    @property
    def wrapped(self) -> bool:
        return list(self.result.model_fields) == ["result"]


# --- handlers ----------------------------------------------------------------------------------


async def _publish(services: Services, caller: PubKey, args: s.PublishArgs) -> dict[str, Any]:
    result = await services.ledger.publish(args.events)
    return result.to_dict()


async def _list_collections(services: Services, caller: PubKey, args: s.NoArgs) -> Any:
    return await services.reads.list_collections(caller)


async def _get_event(services: Services, caller: PubKey, args: s.GetEventArgs) -> Any:
    return await services.reads.get_event(caller, args.id, args.offset, args.max_chars)


async def _search_claims(
    services: Services, caller: PubKey, args: s.SearchClaimsArgs
) -> dict[str, Any]:
    await _readable(services, caller, args.collection)
    reads, vectors = services.reads, services.vectors
    note: str | None = None
    if args.method == "vector":
        query, note = await _query_vector(vectors, args.text)
        if query is not None and vectors is not None:
            items = await reads.search_claims_vector(
                args.collection, query, vectors.model, vectors.dims, args.limit
            )
            pending = await vectors.pending_claims(args.collection)
            if pending:
                note = (
                    f"{pending} claims of this collection are still waiting for vectors and are "
                    "missing from these results; they are being embedded now"
                )
            return {"method": "vector", "note": note, "items": items}
    items = await reads.search_claims_keyword(args.collection, args.text, args.limit)
    return {"method": "keyword", "note": note, "items": items}


async def _query_vector(
    vectors: Vectors | None, text: str
) -> tuple[list[float] | None, str | None]:
    """The query's vector, or None and the note saying why keyword search answers instead."""
    if vectors is None:
        return None, "vector search is off on this server (TMS_EMBED=off): keyword results"
    try:
        return await vectors.query(text), None
    except Exception as exc:  # the model failed: keyword search still answers
        log.warning("query embedding failed: %s", exc)
        return None, f"no vector could be computed ({exc}): keyword results"


async def _list_claims(services: Services, caller: PubKey, args: s.ListClaimsArgs) -> Any:
    await _readable(services, caller, args.collection)
    return await services.reads.list_claims(args.collection, args.sort, args.limit)


async def _get_links(services: Services, caller: PubKey, args: s.GetLinksArgs) -> Any:
    await _readable(services, caller, args.collection)
    return await services.reads.get_links(
        args.collection, args.to_id, args.from_id, args.relation, args.limit
    )


async def _list_evidence(services: Services, caller: PubKey, args: s.ListEvidenceArgs) -> Any:
    await _readable(services, caller, args.collection)
    return await services.reads.list_evidence(
        args.collection, args.ungrounded_only, args.source, args.limit
    )


async def _search_contradictions(
    services: Services, caller: PubKey, args: s.SearchContradictionsArgs
) -> Any:
    await _readable(services, caller, args.collection)
    reads, vectors = services.reads, services.vectors
    if args.claim is not None and args.text is not None:
        raise ToolError("search_contradictions takes `claim` or `text`, not both")
    if args.claim is not None:
        return await reads.search_contradictions_by_claim(args.collection, args.claim, args.limit)
    if args.text is None:
        return await reads.list_contradictions(args.collection, args.limit)
    query, _ = await _query_vector(vectors, args.text)
    if query is not None and vectors is not None:
        return await reads.search_contradictions_vector(
            args.collection, query, vectors.model, vectors.dims, args.limit
        )
    return await reads.search_contradictions_keyword(args.collection, args.text, args.limit)


async def _check_proof(services: Services, caller: PubKey, args: s.CheckProofArgs) -> Any:
    await _readable(services, caller, args.collection)
    events = await services.reads.events_in_collection(args.collection, cited_event_ids(args.proof))
    return check_proof(args.proof, events).to_dict()


async def _fetch_url(services: Services, caller: PubKey, args: s.FetchUrlArgs) -> Any:
    if not await services.ledger.may_use(caller):  # not an open proxy for any key at all
        raise ToolError(f"pubkey {caller} is not approved and is not a member of any collection")
    return (await fetch_url(args.url, allow=services.fetch_allow)).to_dict()


async def _readable(services: Services, caller: PubKey, collection: Slug) -> None:
    if not await services.ledger.can_read(caller, collection):
        raise ToolError(
            f"not a member of collection '{collection}' (or no such collection): "
            "ask its owner to add your key"
        )


# --- the table ---------------------------------------------------------------------------------

_SIGNED: Final = (
    " Takes one argument, `request`: a kind 4707 event you signed whose content is "
    '{"tool": "<this tool>", "args": {...}}, created within 60 s, used once.'
)

TOOLS: Final[dict[str, Tool]] = {
    tool.name: tool
    for tool in [
        Tool(
            "publish",
            "Store signed events (evidence, claims, links, contradictions, member lists, "
            "profiles, terms) as one batch, all or nothing: if any event breaks a rule (a quote "
            "not found verbatim in its evidence, a reference to a missing event, a key not "
            "allowed) nothing is stored and the error names the event. Events already stored "
            "are skipped, so resending a batch is safe. Sign the terms (kind 4706) before your "
            "first write. At most 1000 events per batch, 2,000,000 characters of content each. "
            "Returns the accepted and skipped ids, the collections touched, and how many "
            "vectors were computed for search (`embedded`).",
            s.PublishArgs,
            s.PublishResult,
            _publish,
            signed=False,
        ),
        Tool(
            "list_collections",
            "List the collections you own or belong to, with owner, members and counts of "
            "evidence, claims, links and contradictions. Start here to find a slug." + _SIGNED,
            s.NoArgs,
            s.CollectionList,
            _list_collections,
        ),
        Tool(
            "get_event",
            "Read one event by id: its signed content, signer, author name and times. For "
            "evidence, the text comes in windows: `max_chars` (default 20,000) from `offset`; "
            "`chars` is the full length, so page until offset + max_chars >= chars. Returns "
            "null for an id that does not exist or is outside your collections." + _SIGNED,
            s.GetEventArgs,
            s.EventOrNull,
            _get_event,
        ),
        Tool(
            "search_claims",
            "Find claims in a collection by meaning (`method: vector`, the default; smaller "
            "`distance` is closer) or by keywords (`method: keyword`, PostgreSQL web-search "
            "syntax; higher `rank` is better). Each hit carries the links pointing at it "
            "(quotes cut to 300 characters) and the contradictions it belongs to. Search "
            "before adding a claim, to reuse an existing one. `note` says when results are "
            "keyword-only or incomplete. Distances and ranks are retrieval aids, not "
            "confidence. limit 1-200, default 20." + _SIGNED,
            s.SearchClaimsArgs,
            s.SearchClaimsResult,
            _search_claims,
        ),
        Tool(
            "list_claims",
            "List a collection's claims with counts of SUPPORTS, QUALIFIES and REBUTS links "
            "pointing at each and `findings` (contradictions it belongs to). Sorts: `recent` "
            "newest first (default); `links` most links first; `unsupported` fewest SUPPORTS "
            "first; `unchallenged` fewest REBUTS plus contradictions first, then most "
            "SUPPORTS; `contested` most REBUTS plus contradictions first. Ties: newest, then "
            "id. Use it to find what needs evidence or what is disputed. limit 1-200, default "
            "50." + _SIGNED,
            s.ListClaimsArgs,
            s.ClaimList,
            _list_claims,
        ),
        Tool(
            "get_links",
            "List links in a collection, oldest first, optionally only those pointing at "
            "`to_id`, quoting evidence `from_id`, or of one `relation`. A link is a verbatim "
            "quote from evidence that SUPPORTS, REBUTS or QUALIFIES a claim (or supports or "
            "rebuts a link, contradiction or evidence). limit 1-1000, default 100." + _SIGNED,
            s.GetLinksArgs,
            s.LinkList,
            _get_links,
        ),
        Tool(
            "list_evidence",
            "List a collection's evidence documents, oldest first, without their text (read it "
            "with get_event): title, url, source, length and how many links quote each. "
            "`ungrounded_only: true` gives the evidence no link quotes yet: the work still to "
            "do. `source` filters on the exact source. limit 1-500, default 100." + _SIGNED,
            s.ListEvidenceArgs,
            s.EvidenceList,
            _list_evidence,
        ),
        Tool(
            "search_contradictions",
            "Find contradictions (claims that cannot all hold) in a collection: with `claim`, "
            "those that include that claim; with `text`, by meaning over their reasons and "
            "their claims' texts (keywords when vectors are off); with neither, newest first. "
            "Each comes with its claims and the links that dispute or support it. limit "
            "1-200, default 20." + _SIGNED,
            s.SearchContradictionsArgs,
            s.ContradictionList,
            _search_contradictions,
        ),
        Tool(
            "check_proof",
            "Check a thinking proof (your argument resting on this collection's events) before "
            "you answer: every `from` is an event of the collection or an earlier step, "
            "exactly one step (the answer) is cited by no other, and every step rests on an "
            "event or is marked `gap`. Returns `ok`, every broken rule in `problems`, the "
            "`root` step and a readable `tree` with events expanded. Stores nothing." + _SIGNED,
            s.CheckProofArgs,
            s.ProofResult,
            _check_proof,
        ),
        Tool(
            "fetch_url",
            "Download a public web page, plain text or PDF and return its full text and title, "
            "ready to sign as evidence (kind 4701). Stores nothing. For keys approved or in a "
            "collection. http(s) only, no internal addresses, at most 50 MB downloaded and "
            "2,000,000 characters of text." + _SIGNED,
            s.FetchUrlArgs,
            s.FetchResult,
            _fetch_url,
        ),
    ]
}


# --- calling -----------------------------------------------------------------------------------


class Tools:
    """The tool table bound to the services. With `signer` (stdio with TMS_NSEC), a call
    without a `request` is signed with that key, then checked like any other."""

    def __init__(self, services: Services, *, signer: SecretKey | None = None) -> None:
        self.services = services
        self.signer = signer

    async def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The tool's structured result, or a `TMSError` whose message is for the caller."""
        tool = TOOLS.get(name)
        if tool is None:
            raise ToolError(f"unknown tool '{name[:64]}'; tools/list names them all")
        if not tool.signed:
            published: dict[str, Any] = await tool.run(
                self.services, "", parse_args(tool, arguments)
            )
            return published
        now = int(time.time())
        if self.signer is not None and "request" not in arguments:
            content = compact_json({"tool": name, "args": dict(arguments)})
            request: object = self.signer.sign(KIND_REQUEST, content, now).to_dict()
        else:
            request = request_from_arguments(name, arguments)
        signed = check_request(request, name, now)
        args = parse_args(tool, signed.args)
        await self.services.requests.use(signed, now)
        result = await tool.run(self.services, signed.pubkey, args)
        return {"result": result} if tool.wrapped else result


def parse_args(tool: Tool, arguments: Mapping[str, Any]) -> Any:
    """The tool's typed arguments, or a `ToolError` in the content schemas' words."""
    try:
        return tool.args.model_validate(dict(arguments))
    except ValidationError as exc:
        raise ToolError(str(translate_error(f"{tool.name} args", exc))) from None
