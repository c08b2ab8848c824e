"""NIP-86 relay management on the relay's own URLs: a POST of `/c/<slug>` or `/` with
`Content-Type: application/nostr+json+rpc`, a JSON-RPC body `{"method": ..., "params": [...]}`,
and a NIP-98 `Authorization` header whose `payload` tag is the SHA-256 of that body (so the
signature covers exactly this call). The answer is NIP-86's `{"result": ..., "error": ...}`.

- On a collection's URL its owner manages its members: `allowpubkey`, `unallowpubkey`,
  `listallowedpubkeys`, `supportedmethods`, and `createinvite` (TMS's own method: params
  `[sha256 of a random code]`, the owner's consent to one NIP-43 join with that code, stored
  the same way; the code itself never reaches the server). A change is submitted through the
  ledger's one path as a *membership change*: the NIP-98 event itself with the body (kind 27235,
  `tms.rules.membership`, docs/architecture.md "Membership records"), so it lands in the
  collection's log and export like a member list, and `tms verify-export` and a mirror see it.
  Bans (`banpubkey`) are not offered: a collection is closed to everyone but its members
  already, so unallowing is the ban.
- On `/` the operator (a key of `TMS_OPERATOR_KEYS`) has the operator's commands
  (`tms.relay.operator`).

Every call is single use (its signature, like a signed request's), within NIP-98's 60 seconds,
for the exact URL the server is reached at (`tms.http.origin`), spends its key's rate limit (its
address's is spent at the gate), and every refusal goes to the refusal log under the route's
name. An unknown method gets NIP-86's error shape.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tms.errors import AccessDenied, Refusal, TMSError
from tms.http.bodies import small_body
from tms.http.gate import route_name
from tms.http.login import request_url
from tms.http.statuses import answer
from tms.ledger import Ledger
from tms.nostr import nip98
from tms.nostr.events import Event, loads_strict
from tms.rules.admission import Door, Origin
from tms.rules.expected import APPLIES
from tms.rules.requests import SignedRequest
from tms.runtime import Runtime
from tms.types import PubKey

MEDIA_TYPE: Final = "application/nostr+json+rpc"
MAX_BODY_BYTES: Final = (
    4096  # a call is a method and a key or two (`tms.nostr.events.MAX_BODY_CHARS`)
)
# Nostr apps run in browsers (Flotilla): the call is authenticated by its NIP-98 header alone,
# never by a cookie, so any origin may make it, as any origin may read NIP-11.
CORS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Allow-Methods": "POST",
}
NO_STORE: Final = {"Cache-Control": "no-store", **CORS}

COLLECTION_METHODS: Final = (
    "supportedmethods",
    "allowpubkey",
    "unallowpubkey",
    "listallowedpubkeys",
    "createinvite",  # TMS's: params [the SHA-256 of a new single-use code] (NIP-43 joins)
)


class RpcError(TMSError):
    """A call NIP-86 answers with an error (an unknown method, bad params)."""


def wants_management(content_type: str | None) -> bool:
    """Whether a POST is a NIP-86 call (checked before anything looks for NIP-11's
    `application/nostr+json`, which this media type contains)."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == MEDIA_TYPE


def reply(result: Any) -> JSONResponse:
    return JSONResponse({"result": result}, headers=NO_STORE)


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


class Call:
    """One authenticated NIP-86 call: who signed it, its NIP-98 event, the body as sent, and
    the method and params read from it."""

    def __init__(self, event: Event, body: str, method: str, params: list[Any]) -> None:
        self.event = event
        self.body = body
        self.method = method
        self.params = params

    @property
    def pubkey(self) -> PubKey:
        return self.event.pubkey

    def key_param(self) -> PubKey:
        """The first param as a key: 64 lowercase hex (what NIP-86 sends)."""
        key = self.params[0] if self.params else None
        if not isinstance(key, str) or len(key) != 64 or not _is_hex(key):
            raise RpcError(f"{self.method}: params must be [pubkey (64 lowercase hex), reason?]")
        return key


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


async def authenticated(request: Request) -> Call:
    """Read the body (at most `MAX_BODY_BYTES`) and the NIP-98 header that signs it, once."""
    if not wants_management(request.headers.get("content-type")):
        raise RpcError(f"a NIP-86 call is a POST with Content-Type: {MEDIA_TYPE}")
    raw = await small_body(request.scope, request.receive, MAX_BODY_BYTES)
    runtime = runtime_of(request)
    now = int(time.time())
    event = nip98.authorization(
        request.headers.get("authorization"),
        url=request_url(request, request.app.state.settings.base_url),
        method="POST",
        now=now,
        body=raw,
    )
    services = runtime.services
    await services.throttle.key(event.pubkey)
    await services.requests.use(
        SignedRequest(event.id, event.pubkey, event.created_at, event.sig, {}), now
    )
    try:
        body = raw.decode("utf-8")
        call = loads_strict(body)
    except ValueError:
        raise RpcError("the body must be a JSON-RPC request in UTF-8").refused_as(
            Refusal.INVALID, event.pubkey
        ) from None
    method = call.get("method") if isinstance(call, dict) else None
    params = call.get("params", []) if isinstance(call, dict) else None
    if not isinstance(method, str) or not isinstance(params, list):
        raise RpcError('the body must be {"method": "<name>", "params": [...]}').refused_as(
            Refusal.INVALID, event.pubkey
        )
    return Call(event, body, method, params)


Handler = Callable[[Request, Call], Awaitable[Any]]


async def answered(request: Request, handle: Handler) -> Response:
    """The call answered as NIP-86 says, every refusal in the refusal log; a browser's
    preflight (OPTIONS) answered with what it may send."""
    if request.method == "OPTIONS":
        return Response(status_code=204, headers={**CORS, "Access-Control-Max-Age": "86400"})
    try:
        call = await authenticated(request)
        return reply(await handle(request, call))
    except TMSError as exc:
        said = answer(exc)
        runtime_of(request).services.refusals.refused(exc, route_name(request.scope))
        return JSONResponse(
            {"result": None, "error": said.message},
            said.status,
            headers={**NO_STORE, **said.headers},
        )


def unknown(call: Call, supported: tuple[str, ...]) -> RpcError:
    return RpcError(
        f"method not supported: {call.method!r} (supported: {', '.join(supported)})"
    ).refused_as(Refusal.INVALID, call.pubkey)


# --- a collection's URL: its owner manages its members -----------------------------------------


async def collection_call(request: Request) -> Response:
    return await answered(request, _collection)


async def _collection(request: Request, call: Call) -> Any:
    slug = request.path_params["slug"]
    services = runtime_of(request).services
    if call.method == "supportedmethods":
        return list(COLLECTION_METHODS)
    if call.method not in COLLECTION_METHODS:
        raise unknown(call, COLLECTION_METHODS)
    # A key that may not read the collection hears what it hears of one that does not exist;
    # a member hears that only the owner manages members.
    readable = await services.access.collection(call.pubkey, slug)
    if not await services.access.owns(call.pubkey, slug):
        raise AccessDenied(f"only the owner of collection '{slug}' manages its members").refused_as(
            Refusal.NOT_MEMBER, call.pubkey
        )
    if call.method == "listallowedpubkeys":
        listed = await services.keys.member_list(readable)
        assert listed is not None  # it exists: its owner just asked
        keys = [listed["owner"], *(k for k in listed["members"] if k != listed["owner"])]
        return [{"pubkey": key} for key in keys]
    if call.method == "createinvite" and len(call.params) != 1:
        raise RpcError("createinvite: params must be [the code's SHA-256, 64 lowercase hex]")
    call.key_param()
    return await _change(services.ledger, call, request)


async def _change(ledger: Ledger, call: Call, request: Request) -> bool:
    """Store the NIP-98 event with its body as the membership change it signs (the ledger's
    rules check it again: owner, collection from `u`, payload). A change that a newer record
    in force would leave without effect is refused rather than stored."""
    event = Event(
        call.event.id,
        call.event.pubkey,
        call.event.created_at,
        call.event.kind,
        call.event.tags,
        call.event.content,
        call.event.sig,
        call.body,
    )
    address = request.scope.get("client")
    result = await ledger.submit(
        [event.to_dict()],
        origin=Origin(Door.RELAY, call.pubkey, address[0] if address else None),
        within=request.path_params["slug"],
        expected={request.path_params["slug"]: APPLIES},
    )
    return bool(result["accepted"])
