"""What an operator's write policy is asked about a batch, and what it may answer.

Every door submits through the ledger's one path, which asks its `Admission` (the enabled
plugins' write policies, `tms.extension`) once a batch's envelopes, signatures, schemas and rate
limits have passed and before its transaction: the ledger's own rules still judge it inside the
transaction. Pure: a door names itself and who is calling, a policy answers.

strfry's write-policy plugins answer per event with `accept`, `reject` or `shadowReject`; a
batch here stays all or nothing, so one rejected event refuses the batch with that event's
message, and one shadow-rejected event (with none rejected) makes the whole batch look stored
while nothing is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

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
    """A policy's answer for a batch. `policy` names who decided (the refusal log, metrics)."""

    action: Action
    message: str = ""
    policy: str = ""


ACCEPTED: Final = Decision(Action.ACCEPT)


class Admission(Protocol):
    """What the ledger asks before committing a batch. Never raises for a policy's failure: a
    policy that raises or times out is a REJECT with a message saying so."""

    async def admit(self, events: Sequence[Event], origin: Origin) -> Decision: ...
