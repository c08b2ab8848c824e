"""One error hierarchy whose messages are the user-facing text.

Every front door says `str(error)` in SPEC's words, so the wording here and where these are
raised is the wording of SPEC's "Common errors" table, which the guide repeats
(`tms/pages/templates/docs.md`); a door may frame it in its protocol's way without changing the
words: the CLI after `tms: `, the web and MCP doors as their JSON error, the relay after
NIP-01's machine-readable prefix (`tms.relay.prefixes`). The ledger's errors, the ones every
door meets, are defined here; a door's own protocol errors live with the door that raises them
(the relay's `ProtocolError` and `Refused` in `tms.relay.messages`, the pages' `Refused` in
`tms.pages.door`, a body's `BodyError` in `tms.http.bodies`, a filter's `FilterError` in
`tms.nostr.filters`). Nothing here imports anything but the standard library when loaded;
asyncpg's classes are imported the first time a failure is classified (`_driver_errors`).

Each error also says how the refusal log (`tms.guard.refusals`) files it: its `refusal` kind
(None for what is not a refusal of the caller, such as a database that is down), and `pubkey`,
the caller's key once its signature has verified. Neither is ever shown to anyone.
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from typing import Final, Self


def one_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception's message for a log line or a user: whitespace runs folded, never empty,
    cut to `limit` characters (the last one an ellipsis) when given."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def shown(value: object, limit: int = 64) -> str:
    """Client input quoted in a message: at most `limit` characters, and always encodable (a lone
    surrogate becomes `\\udxxx`), so that no door fails to send the refusal it quotes."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return sendable(text)


def sendable(message: str) -> str:
    """The guard every door applies to a message before sending it: text that UTF-8 can carry."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


class Refusal(StrEnum):
    """The kinds of refusal the refusal log counts: what an operator looks for when probing."""

    BAD_SIGNATURE = "bad_signature"  # an id or signature that does not verify
    UNAUTHENTICATED = "unauthenticated"  # credentials missing, malformed, or for another request
    NOT_MEMBER = "not_member"  # a key that may not do this (not a member, not approved, not owner)
    REPLAY = "replay"  # a request or login used before
    STALE = "stale"  # signed too long ago (or too far ahead)
    RATE_LIMITED = "rate_limited"
    SSRF = "ssrf"  # a URL the fetcher will not go to
    TOO_LARGE = "too_large"  # a body, a document or a batch over a limit
    INVALID = "invalid"  # anything else a client sent wrong
    BLOCKED = "blocked"  # an operator's write policy refused it (tms.rules.admission)
    SHADOW_REJECTED = "shadow_rejected"  # a write policy dropped it while telling the client yes


class TMSError(Exception):
    """Base of every error a user may see; its message is shown verbatim."""

    refusal: Refusal | None = Refusal.INVALID  # how the refusal log files it; None: not at all
    pubkey: str | None = None  # the caller's key, once its signature verified

    def refused_as(self, refusal: Refusal | None, pubkey: str | None = None) -> Self:
        """Say how the refusal log files this one (and whose it is, when that is known)."""
        self.refusal = refusal
        if pubkey is not None:
            self.pubkey = pubkey
        return self


# --- what a client sent ------------------------------------------------------------------------


class InvalidEvent(TMSError):
    """An event's envelope or content breaks NIP-01 or its kind's schema.

    `field` names the offending envelope field (`id`, `sig`, `content`, ...) or the content field
    as `content.<name>`, so callers that prefix a position ("event 3 (ab12...)") keep it.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        if field in ("id", "sig"):
            self.refusal = Refusal.BAD_SIGNATURE


class InvalidKey(TMSError):
    """A key (nsec, npub or hex) that cannot be decoded or is not on the curve."""


class PublishError(TMSError):
    """A batch refused as a whole. The message names the failing event when there is one:
    `where` it sits in the batch (`events[3] (ab12…)`) before SPEC's words (`alone`), so that a
    door that names the event its own way (the relay's OK) says the words alone."""

    where: str | None = None

    def located(self, where: str) -> Self:
        """This refusal, its message prefixed with where the failing event sits in the batch."""
        alone = self.alone
        self.where = where
        self.args = (f"{where}: {alone}",)
        return self

    @property
    def alone(self) -> str:
        """The message without where the event sits."""
        text = str(self)
        return text if self.where is None else text[len(self.where) + 2 :]


class QuoteNotFound(PublishError):
    """A batch refused for a link's quote that is not in its evidence. It carries what the
    nearest passage is looked for with, so that the publish can add it to the message after
    its transaction, outside the locks; `hinted` says whether the message has it already."""

    def __init__(self, message: str, evidence_id: str, quote: str, *, hinted: bool) -> None:
        super().__init__(message)
        self.evidence_id = evidence_id
        self.quote = quote
        self.hinted = hinted

    def with_hint(self, hint: str) -> QuoteNotFound:
        """The same refusal (where it sits, how the refusal log files it) with the nearest
        passage added."""
        hinted = QuoteNotFound(f"{self.alone}; {hint}", self.evidence_id, self.quote, hinted=True)
        if self.where is not None:
            hinted.located(self.where)
        return hinted.refused_as(self.refusal, self.pubkey)


class Blocked(PublishError):
    """A batch an operator's write policy refused (`tms.rules.admission`): its message is the
    policy's, which the relay sends after NIP-01's `blocked:` prefix."""

    refusal = Refusal.BLOCKED


class RequestError(TMSError):
    """A tool call whose `request` is missing, malformed, stale, for another tool or reused."""


class ToolError(TMSError):
    """A tool call refused for its name or its arguments."""


class AuthError(TMSError):
    """A request's credentials (a NIP-98 `Authorization` header) are missing or do not hold up.

    The web layer answers 401 with this message and `WWW-Authenticate: Nostr`."""

    refusal = Refusal.UNAUTHENTICATED


# --- who may do what ---------------------------------------------------------------------------


class AccessDenied(TMSError):
    """The caller's key may not do this."""

    refusal = Refusal.NOT_MEMBER


class NotAReader(AccessDenied):
    """A collection the key may not read, worded exactly as a missing one."""


class NotAUser(AccessDenied):
    """A key that is neither approved nor a member of any collection (the relay says
    `blocked:`)."""


class UnknownSigner(PublishError):
    """A batch refused because a signer is neither approved nor a member of any collection: the
    publish rules' `NotAUser`, refused as a batch is (the relay says `blocked:` for both)."""

    refusal = Refusal.NOT_MEMBER


# --- what the server could not do --------------------------------------------------------------


class FetchError(TMSError):
    """A URL the fetcher refused or could not turn into evidence text: one line, shown as is.

    A page that could not be had ("fetch failed: ...") is no refusal of the caller; one the
    fetcher will not have ("refused: ...") is, and the address rules mark theirs as SSRF."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        if not message.startswith("refused:"):
            self.refusal = None


class RateLimited(TMSError):
    """Over a rate limit (`tms.guard.rates`): HTTP answers 429 with `Retry-After`."""

    refusal = Refusal.RATE_LIMITED

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EmbeddingError(TMSError):
    """The model could not be configured, loaded or run; one line, shown as is."""

    refusal = None


class ConfigError(TMSError):
    """A `TMS_*` variable holds a value we cannot use."""

    refusal = None


# What every door says when the database cannot be used (`Outcome.UNAVAILABLE`).
DATABASE_UNAVAILABLE: Final = "database unavailable, try again shortly"
# What every door says of a failure that is a bug (`Outcome.INTERNAL`): the log has the details.
INTERNAL_ERROR: Final = "internal error"


class DatabaseError(TMSError):
    """The database cannot be reached or is not in a state this version of TMS can use."""

    refusal = None


class LogError(TMSError):
    """A transparency-log checkpoint, key, proof, tile or export that does not hold up: a note
    whose signature fails, a key in the wrong format, a tree size the log never had."""


# --- the one classifier ------------------------------------------------------------------------


class Outcome(StrEnum):
    """What a failure is, for every door: its answer, its metrics' label, whether the log wants
    its traceback."""

    REFUSED = "refused"  # a `TMSError`: the caller is told `str(error)`, in SPEC's words
    UNAVAILABLE = "unavailable"  # the database cannot be used right now: `DATABASE_UNAVAILABLE`
    INTERNAL = "internal"  # anything else, a bug: `INTERNAL_ERROR`, the traceback to the log


def outcome_of(exc: BaseException) -> Outcome:
    """The one classification of a failure. A `DatabaseError` (the database cannot be reached,
    or is in no state this version can use) is unavailable although it is a `TMSError`."""
    if isinstance(exc, DatabaseError) or is_database_down(exc):
        return Outcome.UNAVAILABLE
    if isinstance(exc, TMSError):
        return Outcome.REFUSED
    return Outcome.INTERNAL


def told(exc: BaseException) -> str:
    """What a client is told of a failure, by its outcome: a refusal's own words (encodable,
    `sendable`), `DATABASE_UNAVAILABLE` or `INTERNAL_ERROR`; never an exception's details."""
    outcome = outcome_of(exc)
    if outcome is Outcome.REFUSED:
        return sendable(str(exc))
    return DATABASE_UNAVAILABLE if outcome is Outcome.UNAVAILABLE else INTERNAL_ERROR


# A Citus coordinator relays a connection to a worker lost mid-statement (a worker restarting,
# say) as an internal error carrying libpq's or its own words for it, rather than a connection
# error (which it does use when a worker cannot be reached at all). Lost at the commit, the
# outcome is unknown, as with any database lost then: a publish sent again is safe (what was
# stored is skipped). Besides `FetchError`, which files its own message by how it begins, the
# one place a message's text is read to classify it: the driver's, never a door's.
_WORKER_LOST: Final = re.compile(
    "server closed the connection unexpectedly|could not receive data from server"
    "|no connection to the server|SSL SYSCALL error|connection not open"
    "|failure on connection marked as essential|could not establish any connections to the node"
    "|could not commit transaction for shard"
)


def is_database_down(exc: BaseException) -> bool:
    """Whether an exception means the database cannot be used right now, rather than a bug:
    one of `database_down_types()` (and none of asyncpg's errors that are our own mistakes), or
    a Citus worker lost mid-statement."""
    down, not_down, internal = _driver_errors()
    if isinstance(exc, internal) and _WORKER_LOST.search(str(exc)):
        return True
    return isinstance(exc, down) and not isinstance(exc, not_down)


def database_down_types() -> tuple[type[Exception], ...]:
    """The exception classes that may mean the database is down (what a door that dispatches
    on classes, such as Starlette's exception handlers, registers: it then asks
    `is_database_down`)."""
    return _driver_errors()[0]


@functools.cache
def _driver_errors() -> tuple[
    tuple[type[Exception], ...], tuple[type[Exception], ...], type[Exception]
]:
    """asyncpg's classes, imported when a failure is first classified rather than with this
    module, which the pure packages import: they never touch the driver."""
    import asyncpg

    down: tuple[type[Exception], ...] = (
        DatabaseError,
        OSError,  # includes ConnectionRefusedError and TimeoutError
        asyncpg.PostgresConnectionError,  # includes ConnectionDoesNotExistError
        asyncpg.CannotConnectNowError,
        asyncpg.AdminShutdownError,
        asyncpg.TooManyConnectionsError,
        asyncpg.ObjectNotInPrerequisiteStateError,  # e.g. a database not accepting connections
        asyncpg.exceptions.InternalClientError,  # a pooled connection the server terminated
        asyncpg.InterfaceError,  # "connection is closed", at a transaction's end among others
    )
    # The InterfaceErrors that are our own mistakes (bad arguments to a query), not an outage.
    not_down: tuple[type[Exception], ...] = (
        asyncpg.exceptions.DataError,
        asyncpg.exceptions.ClientConfigurationError,
        asyncpg.exceptions.UnsupportedClientFeatureError,
        asyncpg.exceptions.UnsupportedServerFeatureError,
    )
    return down, not_down, asyncpg.InternalServerError
