"""The HTTP doors' one wire table: what a failure is answered with over HTTP (status, headers and
the words), for the pages, `/mcp`'s front and the gate alike.

Every failure is first classified once (`tms.errors.outcome_of`): a refusal is answered with
its class's status (the nearest class in its ancestry in `STATUS`; a route's own `Refused`
carries its own) and its own words; a database that cannot be used with 503 and
`DATABASE_UNAVAILABLE`; anything else with a bare 500 and `INTERNAL_ERROR`. The doors frame the
words their way (`{"error": ...}`, a page, a JSON-RPC error) and decide nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tms.errors import (
    AccessDenied,
    AuthError,
    NotAReader,
    Outcome,
    RateLimited,
    Refusal,
    TMSError,
    outcome_of,
    told,
)
from tms.http.bodies import Busy, TooLarge

BUSY_RETRY_SECONDS: Final = 5  # what a 503 for a server too busy to read a body asks to wait

# Each refusal's status, by the nearest class in its ancestry.
STATUS: Final[dict[type[TMSError], int]] = {
    TMSError: 400,
    AuthError: 401,
    AccessDenied: 403,
    NotAReader: 404,
    TooLarge: 413,
    RateLimited: 429,
    Busy: 503,
}
# How the refusal log files a route's own refusal (`Refused`), by its status.
REFUSAL_OF_STATUS: Final[dict[int, Refusal]] = {
    400: Refusal.INVALID,
    401: Refusal.UNAUTHENTICATED,
    403: Refusal.UNAUTHENTICATED,
    413: Refusal.TOO_LARGE,
}


class Refused(TMSError):
    """An HTTP route's own refusal: its status and words (and headers, such as Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.refusal = REFUSAL_OF_STATUS.get(status)

    def __reduce__(self) -> tuple[type[Refused], tuple[int, str, dict[str, str]]]:
        """Raised in a worker process too (a big body's check): it must cross back."""
        return Refused, (self.status, str(self), self.headers)


@dataclass(frozen=True, slots=True)
class Answer:
    """A failure as HTTP says it."""

    outcome: Outcome
    status: int
    headers: dict[str, str]
    message: str  # what the client is told (`tms.errors.told`)


def answer(exc: BaseException) -> Answer:
    """The one HTTP answer for a failure."""
    outcome = outcome_of(exc)
    message = told(exc)
    if outcome is Outcome.UNAVAILABLE:
        return Answer(outcome, 503, {}, message)
    if outcome is Outcome.INTERNAL or not isinstance(exc, TMSError):
        return Answer(outcome, 500, {}, message)
    if isinstance(exc, Refused):
        return Answer(outcome, exc.status, exc.headers, message)
    status = next(STATUS[kind] for kind in type(exc).__mro__ if kind in STATUS)
    headers: dict[str, str] = {}
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, AuthError):
        headers["WWW-Authenticate"] = "Nostr"
    elif isinstance(exc, Busy):
        headers["Retry-After"] = str(BUSY_RETRY_SECONDS)
    return Answer(outcome, status, headers, message)
