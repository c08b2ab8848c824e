"""One error hierarchy whose messages are the user-facing text.

Every front door (CLI, MCP, web) shows `str(error)` unchanged, so the wording here is the wording
of SPEC.md's "Common errors" table. Nothing here imports anything but the standard library.
"""


def one_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception's message for a log line or a user: whitespace runs folded, never empty,
    cut to `limit` characters (the last one an ellipsis) when given."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


class TMSError(Exception):
    """Base of every error a user may see; its message is shown verbatim."""


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


class FetchError(TMSError):
    """A URL the fetcher refused or could not turn into evidence text: one line, shown as is."""


class AuthError(TMSError):
    """A request's credentials (a NIP-98 `Authorization` header) are missing or do not hold up.

    The web layer answers 401 with this message and `WWW-Authenticate: Nostr`."""
