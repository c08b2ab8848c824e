"""NIP-86 on the root relay URL (`POST /`): the operator's commands, for the keys of
`TMS_OPERATOR_KEYS`, from any Nostr app that speaks NIP-86 (`tms.relay.management` reads and
authenticates the call).

- `allowpubkey` / `unallowpubkey` / `listallowedpubkeys`: approve, revoke and list the keys that
  may create collections (as `tms approve`, `tms revoke`, `tms approved`);
- `blockip` / `unblockip` / `listblockedips`: client addresses (or networks) the gate refuses,
  every request and relay connection from them (`tms.guard.blocked`);
- `changerelayname` / `changerelaydescription`: the root relay's NIP-11 `name` and
  `description`.

Approvals and blocks are the operator's state, not the ledger's: no collection's log holds them.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from tms.errors import AccessDenied, Refusal
from tms.guard.blocked import Blocklist, parse_address
from tms.ledger import Operated
from tms.relay.management import Call, RpcError, answered, runtime_of, unknown

SUPPORTED: Final = (
    "supportedmethods",
    "allowpubkey",
    "unallowpubkey",
    "listallowedpubkeys",
    "blockip",
    "unblockip",
    "listblockedips",
    "changerelayname",
    "changerelaydescription",
)
MAX_TEXT: Final = 1000  # a reason, a name, a description


async def root_call(request: Request) -> Response:
    return await answered(request, _root)


def _text(call: Call, position: int, what: str, *, required: bool) -> str:
    value = call.params[position] if len(call.params) > position else None
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > MAX_TEXT:
        raise RpcError(
            f"{call.method}: {what} must be a string of 1 to {MAX_TEXT} characters"
        ).refused_as(Refusal.INVALID, call.pubkey)
    return value


async def _root(request: Request, call: Call) -> Any:
    operators: tuple[str, ...] = request.app.state.settings.operator_keys
    if call.method == "supportedmethods":
        return list(SUPPORTED) if operators else ["supportedmethods"]
    if call.method not in SUPPORTED:
        raise unknown(call, SUPPORTED if operators else ("supportedmethods",))
    if call.pubkey not in operators:
        raise AccessDenied(
            "only the operator's keys (TMS_OPERATOR_KEYS) manage this server"
        ).refused_as(Refusal.NOT_MEMBER, call.pubkey)
    ledger = runtime_of(request).ledger
    operated: Operated = request.app.state.operated
    blocklist: Blocklist = request.app.state.blocklist
    method = call.method
    if method == "allowpubkey":
        await ledger.approve([call.key_param()])
        return True
    if method == "unallowpubkey":
        await ledger.revoke([call.key_param()])
        return True
    if method == "listallowedpubkeys":
        return [{"pubkey": pubkey} for pubkey, _ in await ledger.approved()]
    if method in ("blockip", "unblockip"):
        text = _text(call, 0, "the address", required=True)
        try:
            address = str(parse_address(text))
        except ValueError:
            raise RpcError(f"{method}: {text[:64]!r} is not an IP address or network").refused_as(
                Refusal.INVALID, call.pubkey
            ) from None
        if method == "blockip":
            await operated.block(address, _text(call, 1, "the reason", required=False))
        else:
            await operated.unblock(address)
        blocklist.replace(address for address, _ in await operated.blocked())
        return True
    if method == "listblockedips":
        return [{"ip": address, "reason": reason} for address, reason in await operated.blocked()]
    field = "name" if method == "changerelayname" else "description"
    value = _text(call, 0, f"the relay's {field}", required=True)
    await operated.set_detail(field, value)
    blocklist.details = await operated.details()
    return True
