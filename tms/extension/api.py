"""What a plugin is made of: the data types plugin authors build and receive.

Everything here is re-exported by `tms.extension`, whose `__all__` is the public surface (and
its `API_VERSION` the promise on it); this module's own name is not. Plain frozen dataclasses
and callables, so that a plugin is a value a test can build and inspect, not a subclass of
anything: strfry's plugins are a command line, khatru's hooks are functions appended to slices,
and pytest and Datasette load plugins that are plain modules.

The vocabulary is the surface's own: `Door`, `Origin`, `Action`, `Read`, `Committed` and
`Event` are defined here, not the core's classes of the same names re-exported, so that a field
the core adds or moves is not a change to the promise; the machinery (`tms.plugins`) translates
the core's values into these at each seam. Nothing here imports anything of TMS. The one
outside vocabulary the surface promises is Starlette's `Request` and `Response`, which a
route's handler takes and returns (docs/extending.md says which Starlette releases).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal, Protocol

from starlette.requests import Request
from starlette.responses import Response

__all__ = [
    "ACCEPT",
    "SHADOW_REJECT",
    "Action",
    "AfterCommit",
    "Auth",
    "Caller",
    "Committed",
    "Door",
    "Event",
    "Origin",
    "Plugin",
    "PluginError",
    "PluginFactory",
    "Prompt",
    "PromptArgument",
    "Read",
    "ReadFilter",
    "Refused",
    "Route",
    "RouteHandler",
    "Tool",
    "ToolHandler",
    "Verdict",
    "WritePolicy",
    "reject",
]


class PluginError(Exception):
    """Raised by a plugin's factory for a setting it cannot use: start-up stops with one line,
    `plugin '<name>': <this message>`."""


class Refused(Exception):
    """Raised by a tool's handler to refuse a call: the caller is told this message as the
    tool's error, exactly as a core tool's refusal (and the refusal log notes it)."""


# --- who sent a batch, and how ------------------------------------------------------------------


class Door(StrEnum):
    """Which door a batch or a read came through."""

    WEB = "web"  # the pages' submit form (POST /publish)
    MCP = "mcp"  # MCP over HTTP (POST /mcp)
    STDIO = "stdio"  # `tms stdio`
    RELAY = "relay"  # a Nostr client's EVENT on ws://<host>/ or /c/<slug>
    CLI = "cli"  # an operator's command


@dataclass(frozen=True, slots=True)
class Origin:
    """Who sent a batch (or asked for a read) and how: `pubkey` is the key the door
    authenticated (the login cookie, NIP-42 AUTH, a signed request's signer), None when it
    authenticated none (a relay EVENT before AUTH, a publish over MCP, which needs no request);
    `address` is the client's network address (None over stdio and the CLI)."""

    door: Door
    pubkey: str | None = None
    address: str | None = None


class Action(StrEnum):
    """What a write policy does with an event (strfry's three answers)."""

    ACCEPT = "accept"
    REJECT = "reject"  # refused: the client is told `message` (the relay after `blocked:`)
    SHADOW_REJECT = "shadowReject"  # the client is told it was stored; nothing is


# --- the events a write policy judges -----------------------------------------------------------


class SignedEvent(Protocol):
    """What an `Event` is a view of: NIP-01's seven fields (not itself part of the surface)."""

    @property
    def id(self) -> str: ...
    @property
    def pubkey(self) -> str: ...
    @property
    def created_at(self) -> int: ...
    @property
    def kind(self) -> int: ...
    @property
    def tags(self) -> Sequence[Sequence[str]]: ...
    @property
    def content(self) -> str: ...
    @property
    def sig(self) -> str: ...


class Event:
    """A signed event as a write policy sees it: NIP-01's seven fields, read-only, and its
    content's fields parsed on first use (`fields`). The ledger has checked its envelope, its
    signature and its content's schema before any policy is asked."""

    __slots__ = ("_event", "_fields")

    def __init__(self, event: SignedEvent) -> None:
        self._event = event
        self._fields: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        return self._event.id

    @property
    def pubkey(self) -> str:
        return self._event.pubkey

    @property
    def created_at(self) -> int:
        return self._event.created_at

    @property
    def kind(self) -> int:
        return self._event.kind

    @property
    def tags(self) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(tag) for tag in self._event.tags)

    @property
    def content(self) -> str:
        """The content string exactly as signed."""
        return self._event.content

    @property
    def sig(self) -> str:
        return self._event.sig

    def fields(self) -> Mapping[str, Any]:
        """The content's JSON object (every kind TMS stores has one but the membership change,
        kind 27235, whose content is NIP-98's empty string: `{}`): `{"url": ..., ...}` of
        evidence, for example. Parsed once, on first use, since an evidence text may run to two
        million characters and most policies never look."""
        if self._fields is None:
            try:
                parsed = json.loads(self._event.content)
            except ValueError:
                parsed = {}
            self._fields = parsed if isinstance(parsed, dict) else {}
        return self._fields

    def to_dict(self) -> dict[str, Any]:
        """The NIP-01 JSON object, as a Nostr library reads it."""
        event = self._event
        return {
            "id": event.id,
            "pubkey": event.pubkey,
            "created_at": event.created_at,
            "kind": event.kind,
            "tags": [list(tag) for tag in event.tags],
            "content": event.content,
            "sig": event.sig,
        }

    def __repr__(self) -> str:
        return f"Event(id={self.id[:12]}…, kind={self.kind})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A write policy's answer for one event: `ACCEPT`, `reject(message)` or `SHADOW_REJECT`."""

    action: Action
    message: str = ""


ACCEPT: Final = Verdict(Action.ACCEPT)
SHADOW_REJECT: Final = Verdict(Action.SHADOW_REJECT)


def reject(message: str) -> Verdict:
    """Refuse the event, and with it its batch: the client is told `message` (after NIP-01's
    `blocked:` on the relay, as the error over MCP and HTTP)."""
    return Verdict(Action.REJECT, message)


# A write policy: asked once per event of every batch from every door, after the ledger's own
# checks and before its transaction, with the event and who sent it how (`Origin`: the door,
# the key the door authenticated, the client's address).
WritePolicy = Callable[[Event, Origin], Awaitable[Verdict]]


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


# A read filter: asked about a `Read` (a relay REQ, COUNT or NEG-OPEN; an MCP tool's read) before
# it runs. None lets the read through; a message refuses it (the relay's CLOSED or NEG-ERR after
# `blocked:`, the tool's error), as khatru's `RejectFilter` does.
ReadFilter = Callable[[Read], Awaitable[str | None]]


# --- after a commit ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Committed:
    """One batch the ledger committed: the ids it stored (in batch order; events already stored
    before are not among them), the collections it touched, and who sent it."""

    ids: tuple[str, ...]
    collections: tuple[str, ...]
    origin: Origin


# An after-commit hook: called with a `Committed` once per batch that stored something, off the
# request path, in commit order; what it raises is logged and counted, never seen by the client.
AfterCommit = Callable[[Committed], Awaitable[None]]


# --- tools, routes, prompts ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Caller:
    """Who called a plugin's tool and what the core checked they may read, as the tool's
    `reads` declared: the collection its `collection` argument names (`"collection"`), every
    collection the key owns or belongs to (`"all"`), or none (None)."""

    pubkey: str
    collections: tuple[str, ...] = ()


# A tool's handler: the caller (the signed request's key, verified) and the arguments, already
# checked against the tool's `input_schema`. It returns a JSON value (an object is the tool's
# structured result; anything else arrives as {"result": ...}), or raises `Refused`.
ToolHandler = Callable[[Caller, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """An MCP tool. Called like every core tool but `publish`: through a signed kind 4707
    request, used once, the key's rate limit spent, `reads` checked before the handler runs.
    `input_schema` is the JSON Schema (draft 2020-12) of its arguments, an object; with
    `reads="collection"` it must require a string `collection`."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: ToolHandler
    reads: Literal["collection", "all"] | None = "collection"


class Auth(StrEnum):
    """Who may call a plugin's route, checked before its handler runs."""

    NONE = "none"  # anyone; the handler gets no key
    LOGIN = "login"  # a browser logged in to the pages (its cookie; a state-changing method
    # also needs this site's Origin and the session's CSRF token in `X-CSRF-Token`)
    NIP98 = "nip98"  # a NIP-98 `Authorization: Nostr ...` header signed for this URL and method


# A route's handler: Starlette's request, and the key `auth` authenticated (None for NONE).
RouteHandler = Callable[[Request, str | None], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Route:
    """An HTTP route, served at `/plugins/<plugin name><path>`: `path` starts with `/` and may
    hold Starlette's `{name}` parameters (`request.path_params`)."""

    path: str
    handler: RouteHandler
    methods: tuple[str, ...] = ("GET",)
    auth: Auth = Auth.NONE


@dataclass(frozen=True, slots=True)
class PromptArgument:
    name: str
    description: str
    required: bool = True


@dataclass(frozen=True, slots=True)
class Prompt:
    """An MCP prompt: `render` turns the arguments into the prompt's text, or raises
    `ValueError`, whose message the client is told."""

    name: str
    description: str
    render: Callable[[Mapping[str, str]], str]
    arguments: tuple[PromptArgument, ...] = ()


# --- the plugin ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plugin:
    """A plugin: its name (the one `TMS_PLUGINS` enables it by, also its routes' prefix) and
    what it adds. Every part is optional.

    `strfry_command` is a shell command speaking strfry's write-policy protocol (JSON Lines on
    stdin and stdout), run as one long-lived child process; it is a single-slot seam: one
    plugin at most may fill it."""

    name: str
    tools: Sequence[Tool] = ()
    routes: Sequence[Route] = ()
    prompts: Sequence[Prompt] = ()
    write_policy: WritePolicy | None = None
    read_filter: ReadFilter | None = None
    after_commit: AfterCommit | None = None
    strfry_command: str | None = None


# What an entry point may name instead of a `Plugin`: a factory the loader calls once at start-up
# with the environment (the `TMS_*` variables), raising `PluginError` for a setting it cannot use.
PluginFactory = Callable[[Mapping[str, str]], Plugin]
