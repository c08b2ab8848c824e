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
the driver's failures are translated into this module's typed ones where the database is called
(`tms.store.driver`), so that a failure is classified by its class alone (`outcome_of`).

Each error also says how the refusal log (`tms.guard.refusals`) files it: its `refusal` kind
(None for what is not a refusal of the caller, such as a database that is down), and `pubkey`,
the caller's key once its signature has verified. Neither is ever shown to anyone.
"""

from __future__ import annotations

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
    """A URL the fetcher could not turn into evidence text ("fetch failed: ...", "no text could
    be extracted from ..."): one line, shown as is; no refusal of the caller."""

    refusal: Refusal | None = None


class FetchRefused(FetchError):
    """A URL the fetcher will not have ("refused: ..."): a refusal of the caller, which the
    address rules mark as SSRF."""

    refusal = Refusal.INVALID


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


# --- what the database could not do ------------------------------------------------------------


class StoreError(Exception):
    """The database could not do what was asked: raised by the store where the database is
    called (`tms.store.driver`) in place of the driver's error, which is its `__cause__`. Its
    message is the driver's, for the operator's log; a client is never shown it (`told` says
    its outcome's words)."""


class DatabaseUnavailable(StoreError):
    """The database cannot be used right now: refused, lost, shutting down, out of
    connections, or a Citus worker lost mid-statement."""


class StatementTimeout(StoreError):
    """PostgreSQL stopped a statement at its pool's `statement_timeout`: the read asked too
    much (the relay says so, `tms.relay.prefixes`), not an outage."""


# --- the one classifier ------------------------------------------------------------------------


class Outcome(StrEnum):
    """How an answer went, for every door, the metrics and the refusal log: its value is the
    label `tms.metrics` counts it under. A failure is one of REFUSED, UNAVAILABLE or INTERNAL
    (`outcome_of`), which also says its answer and whether the log wants its traceback."""

    OK = "ok"  # answered as asked
    ACCEPTED = "accepted"  # a publish stored (or found stored before)
    REFUSED = "refused"  # a `TMSError`: the caller is told `str(error)`, in SPEC's words
    RATE_LIMITED = "rate_limited"  # an HTTP 429 (counted apart from the other refusals)
    UNAVAILABLE = "unavailable"  # the database cannot be used right now: `DATABASE_UNAVAILABLE`
    INTERNAL = "error"  # anything else, a bug: `INTERNAL_ERROR`, the traceback to the log
    GONE = "gone"  # the client left before any answer


def outcome_of(exc: BaseException) -> Outcome:
    """The one classification of a failure, by its class alone: the store raises typed errors
    where the database is called (`tms.store.driver`). A `DatabaseError` (the database is in no
    state this version can use) is unavailable although it is a `TMSError`."""
    if isinstance(exc, (DatabaseUnavailable, DatabaseError)):
        return Outcome.UNAVAILABLE
    if isinstance(exc, TMSError):
        return Outcome.REFUSED
    return Outcome.INTERNAL


def is_database_down(exc: BaseException) -> bool:
    """Whether a failure means the database cannot be used right now, rather than a bug (what
    the background tasks ask before they wait for it to come back)."""
    return outcome_of(exc) is Outcome.UNAVAILABLE


def told(exc: BaseException) -> str:
    """What a client is told of a failure, by its outcome: a refusal's own words (encodable,
    `sendable`), `DATABASE_UNAVAILABLE` or `INTERNAL_ERROR`; never an exception's details."""
    outcome = outcome_of(exc)
    if outcome is Outcome.REFUSED:
        return sendable(str(exc))
    return DATABASE_UNAVAILABLE if outcome is Outcome.UNAVAILABLE else INTERNAL_ERROR
