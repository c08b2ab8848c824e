"""What an operator's plugins are asked and told by the core: a batch before it is stored (the
write policy), a read before it runs (the read filter), and a batch once it is committed.

Every door submits through the ledger's one path, which asks its `Admission` (the enabled
plugins' write policies, `tms.plugins`) once a batch's envelopes, signatures, schemas and rate
limits have passed and before its transaction: the ledger's own rules still judge it inside the
transaction; and hands each batch that stored something to its `CommitHook` once committed. The
relay and the MCP tools ask their `ReadCheck` before a read. Pure: a door names itself and who
is calling, a policy answers.

strfry's write-policy plugins answer per event with `accept`, `reject` or `shadowReject`; a
batch here stays all or nothing, so one rejected event refuses the batch with that event's
message, and one shadow-rejected event (with none rejected) makes the whole batch look stored
while nothing is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Protocol

from tms.nostr.events import Event
from tms.types import PubKey


class Door(StrEnum):
    """Which door a batch came through: what a policy sees as where it came from."""

    WEB = "web"  # the pages' submit form (POST /publish)
    MCP = "mcp"  # MCP over HTTP (POST /mcp)
    STDIO = "stdio"  # `tms stdio`
    RELAY = "relay"  # a Nostr client's EVENT on ws://<host>/ or /c/<slug>
    CLI = "cli"  # an operator's command


@dataclass(frozen=True, slots=True)
class Origin:
    """Who sent a batch and how: `pubkey` is the key the door authenticated (the login cookie,
    NIP-42 AUTH, a signed request's signer), None when it authenticated none (a relay EVENT
    before AUTH, a publish over MCP, which needs no request); `address` is the client's network
    address (None over stdio and the CLI)."""

    door: Door
    pubkey: PubKey | None = None
    address: str | None = None


# A batch the operator's own code submits in-process (a command, a benchmark, a test's set-up):
# no network door, no authenticated key, no address.
OPERATOR: Final = Origin(Door.CLI)


class Action(StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"  # refused: the client is told `message` (the relay after `blocked:`)
    SHADOW_REJECT = "shadowReject"  # the client is told it was stored; nothing is


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer for a batch. `policy` names who decided (the refusal log, metrics);
    `event`, the position in the batch of the event decided on, which the ledger names before
    `message` as it names any failing event (`events[3] (ab12…): ...`), and a door that names
    the event its own way (the relay's OK) leaves out."""

    action: Action
    message: str = ""
    policy: str = ""
    event: int | None = None


ACCEPTED: Final = Decision(Action.ACCEPT)


class Admission(Protocol):
    """What the ledger asks before committing a batch. Never raises for a policy's failure: a
    policy that raises or times out is a REJECT with a message saying so."""

    async def admit(self, events: Sequence[Event], origin: Origin) -> Decision: ...


# --- reads ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Read:
    """A read a read filter is asked about: a relay REQ, COUNT or NEG-OPEN (its NIP-01
    `filters`), or an MCP tool's read (`tool`). `collection` is the one the read is confined to
    (a `/c/<slug>` relay, the collection a tool's `collection` argument names), None for the
    root relay and the tools that read every collection the key may."""

    origin: Origin
    collection: str | None = None
    filters: tuple[Mapping[str, Any], ...] = ()
    tool: str | None = None


class ReadCheck(Protocol):
    """What a door asks before a read: None lets it through, a message refuses it (the relay's
    CLOSED or NEG-ERR after `blocked:`, the tool's error). Never raises for a filter's failure:
    a filter that raises or times out refuses, saying so."""

    async def check(self, read: Read) -> str | None: ...


# --- after a commit ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Committed:
    """One batch the ledger committed: the ids it stored (in batch order; events already stored
    before are not among them), the collections it touched, and who sent it."""

    ids: tuple[str, ...]
    collections: tuple[str, ...]
    origin: Origin


class CommitHook(Protocol):
    """What the ledger hands each committed batch that stored at least one event, once, as its
    transaction commits: it must return at once and never raise (the plugins' hooks queue it,
    `tms.plugins.hooks`); a shadow-rejected batch is never handed on."""

    def submit(self, committed: Committed) -> None: ...
