"""One error hierarchy whose messages are the user-facing text.

Every front door (CLI, MCP, web) shows `str(error)` unchanged, so the wording here and where
these are raised is the wording of SPEC.md's "Common errors" table. Every subclass a user can
meet is defined here, so the whole vocabulary of refusals reads in one place. Nothing here
imports anything but the standard library.
"""

from __future__ import annotations


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


class TMSError(Exception):
    """Base of every error a user may see; its message is shown verbatim."""


# --- what a client sent ------------------------------------------------------------------------


class InvalidEvent(TMSError):
    """An event's envelope or content breaks NIP-01 or its kind's schema.

    `field` names the offending envelope field (`id`, `sig`, `content`, ...) or the content field
    as `content.<name>`, so callers that prefix a position ("event 3 (ab12...)") keep it.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidKey(TMSError):
    """A key (nsec, npub or hex) that cannot be decoded or is not on the curve."""


class PublishError(TMSError):
    """A batch refused as a whole. The message names the failing event when there is one."""


class QuoteNotFound(PublishError):
    """A batch refused for a link's quote that is not in its evidence. It carries what the
    nearest passage is looked for with, so that the publish can add it to the message after
    its transaction, outside the locks; `hinted` says whether the message has it already."""

    def __init__(self, message: str, evidence_id: str, quote: str, *, hinted: bool) -> None:
        super().__init__(message)
        self.evidence_id = evidence_id
        self.quote = quote
        self.hinted = hinted

    def located(self, where: str) -> QuoteNotFound:
        """The same refusal, its message prefixed with where the event sits in the batch."""
        return QuoteNotFound(f"{where}: {self}", self.evidence_id, self.quote, hinted=self.hinted)


class RequestError(TMSError):
    """A tool call whose `request` is missing, malformed, stale, for another tool or reused."""


class ToolError(TMSError):
    """A tool call refused for its name or its arguments."""


class AuthError(TMSError):
    """A request's credentials (a NIP-98 `Authorization` header) are missing or do not hold up.

    The web layer answers 401 with this message and `WWW-Authenticate: Nostr`."""


# --- who may do what ---------------------------------------------------------------------------


class AccessDenied(TMSError):
    """The caller's key may not do this."""


class NotAReader(AccessDenied):
    """A collection the key may not read, worded exactly as a missing one."""


class NotAUser(AccessDenied):
    """A key that is neither approved nor a member of any collection."""


# --- what the server could not do --------------------------------------------------------------


class FetchError(TMSError):
    """A URL the fetcher refused or could not turn into evidence text: one line, shown as is."""


class EmbeddingError(TMSError):
    """The model could not be configured, loaded or run; one line, shown as is."""


class ConfigError(TMSError):
    """A `TMS_*` variable holds a value we cannot use."""


# What every door says when the database cannot be used (tms.store.database.is_database_down).
DATABASE_UNAVAILABLE = "database unavailable, try again shortly"


class DatabaseError(TMSError):
    """The database cannot be reached or is not in a state this version of TMS can use."""


class LogError(TMSError):
    """A transparency-log checkpoint, key, proof, tile or export that does not hold up: a note
    whose signature fails, a key in the wrong format, a tree size the log never had."""
