"""The tools agents call, independent of transport: MCP over HTTP and over stdio both call
`Tools.call`, which checks the signed request and the arguments, then asks the access module
what the key may read (`Tool.reads`) and hands the handler that capability: the read services
take nothing else, so a handler cannot read past it. A `Tool` is generic over what it reads: its
`reads` and its handler's second parameter name the same type (`Reads[ReadableCollection]` and
a handler taking a `ReadableCollection`, ...), so mypy refuses a tool whose handler reads more
than it declared. Handlers call the same services the pages use, so no rule is written twice;
`publish` submits through the ledger's one path, naming the door (`Origin`).

`TOOLS` is the core's registry (`tms.registry`); a server serves a copy of it to which the enabled
plugins' tools are added (`tms.extension`), a name taken twice stopping start-up. A plugin's tool is
a `Tool` like the core's, its arguments described and checked by its own JSON Schema (`Checked`):
it is called through the same signed request, rate limit and access check.

Before a tool reads (one collection, or every collection the key may), the operator's read filter,
when there is one (`Services.read_filter`), is asked with the tool's name and the collection: its
refusal is the tool's error.

A key reads only collections it owns or belongs to. A collection outside them, and one that does
not exist, get the same refusal; an event outside them is the same `null` as a missing one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from typing_extensions import is_typeddict

from tms.errors import Refusal, RequestError, TMSError, ToolError
from tms.fetch.client import fetch_url
from tms.guard import clients
from tms.ledger import Access, ReadableCollection, Reader
from tms.mcp import schemas as s
from tms.nostr.events import SecretKey, compact_json
from tms.registry import Registry
from tms.results import (
    CheckpointInfo,
    ClaimSummary,
    CollectionInfo,
    ConsistencyProof,
    ContradictionInfo,
    EventInfo,
    EvidenceSummary,
    FetchResult,
    LinkInfo,
    ProofResult,
    PublishResult,
    ReceiptInfo,
    SearchClaimsResult,
)
from tms.rules.admission import Door, Origin, Read
from tms.rules.content import translate_error
from tms.rules.proofs import check_proof, cited_event_ids
from tms.rules.requests import check_request, request_from_arguments
from tms.services import Services
from tms.types import KIND_REQUEST, PubKey

R = TypeVar("R")  # what a tool's handler is handed to read with
A = TypeVar("A", bound=BaseModel)  # a tool's arguments


@dataclass(frozen=True, slots=True)
class Reads(Generic[R]):
    """What a tool's handler reads, and so what it is handed in place of the caller's key: made
    by `grant` from the access module's answer for the caller (`origin.pubkey`, its signature
    verified) and the tool's arguments."""

    name: str
    grant: Callable[[Access, Origin, Any], Awaitable[R]]


def _signer(origin: Origin) -> PubKey:
    if origin.pubkey is None:  # a signed tool's caller is always known by now
        raise ToolError("this tool takes a signed `request`")
    return origin.pubkey


async def _one_collection(access: Access, origin: Origin, args: Any) -> ReadableCollection:
    return await access.collection(_signer(origin), args.collection)


async def _every_collection(access: Access, origin: Origin, args: Any) -> Reader:
    return await access.reader(_signer(origin))


async def _the_key(access: Access, origin: Origin, args: Any) -> PubKey:
    return _signer(origin)


async def _the_origin(access: Access, origin: Origin, args: Any) -> Origin:
    return origin


# The `ReadableCollection` the tool's `collection` argument names; the caller's `Reader` over
# every collection it may read; the key alone (reading nothing: fetch_url); where the call came
# from (an unsigned tool, which reads nothing: publish).
ONE_COLLECTION: Final[Reads[ReadableCollection]] = Reads("collection", _one_collection)
EVERY_COLLECTION: Final[Reads[Reader]] = Reads("all", _every_collection)
THE_KEY: Final[Reads[PubKey]] = Reads("key", _the_key)
THE_ORIGIN: Final[Reads[Origin]] = Reads("origin", _the_origin)


# The reads a read filter is asked about before the handler runs (`Services.read_filter`).
FILTERED_READS: Final = frozenset({"collection", "all"})


class Checked(Protocol):
    """Arguments described and checked by a JSON Schema of their own, before the tool's `args`
    model takes them (a plugin's tool): `schema` is what `tools/list` shows, `check` returns
    the arguments or raises `ToolError` saying where they break it."""

    @property
    def schema(self) -> Mapping[str, Any]: ...

    def check(self, arguments: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Tool(Generic[R, A]):
    name: str
    description: str
    args: type[A]
    result: Any  # the result's type: a typed dict, or a list or nullable value sent wrapped
    run: Callable[[Services, R, A], Awaitable[Any]]  # handed what `reads` grants
    reads: Reads[R]
    signed: bool = True  # every tool but publish takes a signed request
    checked: Checked | None = None  # a plugin's tool: its own schema, checked first

    @property
    def wrapped(self) -> bool:
        """SPEC: results that are a list, or that can be null, arrive as {"result": ...}."""
        return not is_typeddict(self.result)


# --- handlers: parse nothing, decide nothing; ask the services ---------------------------------


async def _publish(services: Services, origin: Origin, args: s.PublishArgs) -> PublishResult:
    return await services.ledger.submit(args.events, origin=origin, route="publish")


async def _list_collections(
    services: Services, reader: Reader, args: s.NoArgs
) -> list[CollectionInfo]:
    return await services.reads.list_collections(reader)


async def _get_event(services: Services, reader: Reader, args: s.GetEventArgs) -> EventInfo | None:
    event = await services.reads.get_event(reader, args.id, args.offset, args.max_chars)
    if event is not None and args.proof and event["collection"] is not None:
        readable = reader.collection(event["collection"])
        proof = await services.tlog.inclusion(readable, event["id"])
        if proof is not None:
            event["proof"] = proof
    return event


async def _get_checkpoint(
    services: Services, readable: ReadableCollection, args: s.GetCheckpointArgs
) -> CheckpointInfo:
    return await services.tlog.witnessed(readable)


async def _get_consistency(
    services: Services, readable: ReadableCollection, args: s.GetConsistencyArgs
) -> ConsistencyProof:
    return await services.tlog.consistency(readable, args.old_size, args.new_size)


async def _get_receipt(
    services: Services, readable: ReadableCollection, args: s.GetReceiptArgs
) -> ReceiptInfo | None:
    return await services.tlog.receipt(readable, args.id)


async def _search_claims(
    services: Services, readable: ReadableCollection, args: s.SearchClaimsArgs
) -> SearchClaimsResult:
    return await services.search.claims(readable, args.text, args.method, args.limit)


async def _list_claims(
    services: Services, readable: ReadableCollection, args: s.ListClaimsArgs
) -> list[ClaimSummary]:
    return await services.reads.list_claims(readable, args.sort, args.limit)


async def _get_links(
    services: Services, readable: ReadableCollection, args: s.GetLinksArgs
) -> list[LinkInfo]:
    return await services.reads.get_links(
        readable, args.to_id, args.from_id, args.relation, args.limit
    )


async def _list_evidence(
    services: Services, readable: ReadableCollection, args: s.ListEvidenceArgs
) -> list[EvidenceSummary]:
    return await services.reads.list_evidence(
        readable, args.ungrounded_only, args.source, args.limit
    )


async def _search_contradictions(
    services: Services, readable: ReadableCollection, args: s.SearchContradictionsArgs
) -> list[ContradictionInfo]:
    if args.claim is not None and args.text is not None:
        raise ToolError("search_contradictions takes `claim` or `text`, not both")
    if args.claim is not None:
        return await services.reads.contradictions_with_claim(readable, args.claim, args.limit)
    if args.text is not None:
        return await services.search.contradictions(readable, args.text, args.limit)
    return await services.reads.list_contradictions(readable, args.limit)


async def _check_proof(
    services: Services, readable: ReadableCollection, args: s.CheckProofArgs
) -> ProofResult:
    cited = await services.reads.cited(readable, cited_event_ids(args.proof))
    return check_proof(args.proof, cited)


async def _fetch_url(services: Services, caller: PubKey, args: s.FetchUrlArgs) -> FetchResult:
    await services.access.require_user(caller)  # not an open proxy for any key at all
    await services.throttle.fetch(caller)
    return await fetch_url(args.url, allow=services.fetch_allow)


# --- the table ---------------------------------------------------------------------------------

_SIGNED: Final = (
    " Takes one argument, `request`: a kind 4707 event you signed whose content is "
    '{"tool": "<this tool>", "args": {...}}, created within 60 s, used once.'
)

TOOLS: Final[Registry[Tool[Any, Any]]] = Registry("MCP tool")


for _tool in (
    Tool(
        "publish",
        "Store signed events (evidence, claims, links, contradictions, member lists, "
        "profiles, terms) as one batch, all or nothing: if any event breaks a rule (a quote "
        "not found verbatim in its evidence, a reference to a missing event, a key not "
        "allowed) nothing is stored and the error names the event; a quote not found comes "
        "with the nearest passage of the evidence, as a hint. Events already stored "
        "are skipped, so resending a batch is safe. Sign the terms (kind 4706) before your "
        "first write. At most 1000 events per batch, 2,000,000 characters of content each. "
        "Returns the accepted and skipped ids, the collections touched, how many "
        "vectors were computed for search (`embedded`), and each collection's new signed "
        "checkpoint (`checkpoints`): keep them to check later exports against.",
        s.PublishArgs,
        PublishResult,
        _publish,
        THE_ORIGIN,
        signed=False,
    ),
    Tool(
        "list_collections",
        "List the collections you own or belong to, with owner, members and counts of "
        "evidence, claims, links and contradictions. Start here to find a slug." + _SIGNED,
        s.NoArgs,
        list[CollectionInfo],
        _list_collections,
        EVERY_COLLECTION,
    ),
    Tool(
        "get_event",
        "Read one event by id: its signed content, signer, author name and times. For "
        "evidence, the text comes in windows: `max_chars` (default 20,000) from `offset`; "
        "`chars` is the full length, so page until offset + max_chars >= chars. With "
        "`proof: true`, adds the event's leaf index in its collection's transparency log "
        "and an RFC 9162 inclusion proof against the latest signed checkpoint. Returns "
        "null for an id that does not exist or is outside your collections. A link comes "
        "with its `anchor` (where its quote sits in the evidence)." + _SIGNED,
        s.GetEventArgs,
        EventInfo | None,
        _get_event,
        EVERY_COLLECTION,
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
        SearchClaimsResult,
        _search_claims,
        ONE_COLLECTION,
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
        list[ClaimSummary],
        _list_claims,
        ONE_COLLECTION,
    ),
    Tool(
        "get_links",
        "List links in a collection, oldest first, optionally only those pointing at "
        "`to_id`, quoting evidence `from_id`, or of one `relation`. A link is a verbatim "
        "quote from evidence that SUPPORTS, REBUTS or QUALIFIES a claim (or supports or "
        "rebuts a link, contradiction or evidence). Each has an `anchor`: where its quote "
        "sits in the evidence text (`start` and `end` in characters, as get_event's "
        "`offset` counts; the `exact` text with 32 characters of `prefix` and `suffix`; "
        "how many `occurrences`). limit 1-1000, default 100." + _SIGNED,
        s.GetLinksArgs,
        list[LinkInfo],
        _get_links,
        ONE_COLLECTION,
    ),
    Tool(
        "list_evidence",
        "List a collection's evidence documents, oldest first, without their text (read it "
        "with get_event): title, url, source, length and how many links quote each. "
        "`ungrounded_only: true` gives the evidence no link quotes yet: the work still to "
        "do. `source` filters on the exact source. limit 1-500, default 100." + _SIGNED,
        s.ListEvidenceArgs,
        list[EvidenceSummary],
        _list_evidence,
        ONE_COLLECTION,
    ),
    Tool(
        "search_contradictions",
        "Find contradictions (claims that cannot all hold) in a collection: with `claim`, "
        "those that include that claim; with `text`, by meaning over their reasons and "
        "their claims' texts (keywords when vectors are off); with neither, newest first. "
        "Each comes with its claims and the links that dispute or support it. limit "
        "1-200, default 20." + _SIGNED,
        s.SearchContradictionsArgs,
        list[ContradictionInfo],
        _search_contradictions,
        ONE_COLLECTION,
    ),
    Tool(
        "check_proof",
        "Check a thinking proof (your argument resting on this collection's events) before "
        "you answer: every `from` is an event of the collection or an earlier step, "
        "exactly one step (the answer) is cited by no other, and every step rests on an "
        "event or is marked `gap`. Returns `ok`, every broken rule in `problems`, the "
        "`root` step, a readable `tree` with events expanded, and `contested`: the cited "
        "claims that a REBUTS link targets or a contradiction names, with their reasons; "
        "and `disputed_links`: the cited links that a REBUTS link targets. `ok` ignores "
        "disputes; look at `contested` and `disputed_links` before relying on the proof. "
        "Stores nothing." + _SIGNED,
        s.CheckProofArgs,
        ProofResult,
        _check_proof,
        ONE_COLLECTION,
    ),
    Tool(
        "get_checkpoint",
        "Read a collection's latest checkpoint: the size and RFC 6962 root of its "
        "transparency log (every event of the collection, in ledger order), signed by the "
        "server as a C2SP signed note. Keep it: a later export, or a consistency proof, "
        "shows whether the server still shows you the same history. Check the signature "
        "with the key at GET /log-key." + _SIGNED,
        s.GetCheckpointArgs,
        CheckpointInfo,
        _get_checkpoint,
        ONE_COLLECTION,
    ),
    Tool(
        "get_consistency",
        "Prove that a collection's transparency log at `old_size` entries is a prefix of "
        "it at `new_size` (default: the latest checkpoint's size): the RFC 9162 "
        "consistency proof, and the signed checkpoint at `new_size`. With a checkpoint you "
        "kept, this shows that nothing you were shown was dropped, changed or "
        "reordered." + _SIGNED,
        s.GetConsistencyArgs,
        ConsistencyProof,
        _get_consistency,
        ONE_COLLECTION,
    ),
    Tool(
        "get_receipt",
        "Get a receipt for one event of a collection: a C2SP tlog-proof "
        "(c2sp.org/tlog-proof@v1) carrying the event, its index in the collection's "
        "transparency log, its inclusion path and the checkpoint get_checkpoint shows (with "
        "witnesses, their cosignatures in it). Hand it over with the event you cite: anyone "
        "checks it offline with tms verify-receipt, without the server. Returns null for an "
        "id that is not an event of the collection." + _SIGNED,
        s.GetReceiptArgs,
        ReceiptInfo | None,
        _get_receipt,
        ONE_COLLECTION,
    ),
    Tool(
        "fetch_url",
        "Download a public web page, plain text or PDF and return its full text and title, "
        "ready to sign as evidence (kind 4701). Stores nothing. For keys approved or in a "
        "collection. http(s) only, no internal addresses, at most 50 MB downloaded and "
        "2,000,000 characters of text." + _SIGNED,
        s.FetchUrlArgs,
        FetchResult,
        _fetch_url,
        THE_KEY,
    ),
):
    TOOLS.register(_tool.name, _tool)


# --- calling -----------------------------------------------------------------------------------


class Tools:
    """The tool registry bound to the services, for one door (`Door.MCP` over HTTP,
    `Door.STDIO`). With `signer` (stdio with TMS_NSEC), a call without a `request` is signed
    with that key, then checked like any other. `unsigned_hint` ends the refusal of a call that
    carries no `request` (stdio without TMS_NSEC: the agent sees only that refusal, never the
    server's stderr, so it says what would sign for it)."""

    def __init__(
        self,
        services: Services,
        *,
        signer: SecretKey | None = None,
        door: Door = Door.MCP,
        tools: Mapping[str, Tool[Any, Any]] = TOOLS,
        unsigned_hint: str | None = None,
    ) -> None:
        self.services = services
        self.signer = signer
        self.door = door
        self.tools = tools
        self.unsigned_hint = unsigned_hint

    async def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The tool's structured result, or a `TMSError` whose message is for the caller (and
        which the refusal log has noted)."""
        try:
            return await self._call(name, arguments)
        except TMSError as exc:
            self.services.refusals.refused(exc, name if name in self.tools else "unknown tool")
            raise

    async def _call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool '{name[:64]}'; tools/list names them all")
        address = clients.CURRENT.get()  # the HTTP door's client; none over stdio
        if not tool.signed:
            args = parse_args(tool, arguments)
            origin = Origin(self.door, None, address)
            unsigned = await tool.run(
                self.services, await tool.reads.grant(self.services.access, origin, args), args
            )
            return {"result": unsigned} if tool.wrapped else dict(unsigned)
        now = int(time.time())
        if self.signer is not None and "request" not in arguments:
            content = compact_json({"tool": name, "args": dict(arguments)})
            request: object = self.signer.sign(KIND_REQUEST, content, now).to_dict()
        else:
            try:
                request = request_from_arguments(name, arguments)
            except RequestError as exc:
                if self.unsigned_hint is None or "request" in arguments:
                    raise
                raise RequestError(f"{exc}; {self.unsigned_hint}").refused_as(exc.refusal) from None
        signed = check_request(request, name, now)
        try:  # from here on the key is known: its signature verified
            await self.services.throttle.key(signed.pubkey)
            args = parse_args(tool, signed.args)
            await self.services.requests.use(signed, now)
            # What the handler reads with: the access module's answer for this key, asked once
            # here rather than in every handler (`Tool.reads`).
            origin = Origin(self.door, signed.pubkey, address)
            granted = await tool.reads.grant(self.services.access, origin, args)
            await self._filtered(tool, origin, granted)
            result = await tool.run(self.services, granted, args)
        except TMSError as exc:
            exc.pubkey = exc.pubkey or signed.pubkey
            raise
        return {"result": result} if tool.wrapped else result

    async def _filtered(self, tool: Tool[Any, Any], origin: Origin, granted: Any) -> None:
        """The operator's read filter, asked before the tool reads: with the collection the
        access check granted, or None for every collection the key may read."""
        read_filter = self.services.read_filter
        if read_filter is None or tool.reads.name not in FILTERED_READS:
            return
        collection = granted.slug if isinstance(granted, ReadableCollection) else None
        refusal = await read_filter.check(Read(origin, collection, (), tool.name))
        if refusal is not None:
            raise ToolError(refusal).refused_as(Refusal.BLOCKED)


def parse_args(tool: Tool[Any, A], arguments: Mapping[str, Any]) -> A:
    """The tool's typed arguments, or a `ToolError` in the content schemas' words (or, for a
    plugin's tool, in its JSON Schema's: `Checked`)."""
    if tool.checked is not None:
        arguments = tool.checked.check(arguments)
    try:
        return tool.args.model_validate(dict(arguments))
    except ValidationError as exc:
        raise ToolError(str(translate_error(f"{tool.name} args", exc))) from None
