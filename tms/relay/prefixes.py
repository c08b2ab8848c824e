"""The one table from the ledger's refusals to NIP-01's machine-readable prefixes.

Every door says a refusal in SPEC's words (`str(error)`); the relay puts NIP-01's prefix in
front, chosen by the refusal's kind (`tms.errors.Refusal`) or, for what is no refusal of the
caller (the database is down, the log cannot be signed), `error:`. A one-event batch's position
("events[0] (ab12…): ") is dropped: the OK names the event already. An error that is not a
refusal at all (`failure`) is logged here and said as `error:`, without its details.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from tms.errors import DATABASE_UNAVAILABLE, NotAUser, Refusal, TMSError, one_line, sendable
from tms.store.database import is_database_down, is_statement_timeout

log = logging.getLogger(__name__)

PREFIXES: Final[dict[Refusal, str]] = {
    Refusal.BAD_SIGNATURE: "invalid",
    Refusal.INVALID: "invalid",
    Refusal.TOO_LARGE: "invalid",
    Refusal.STALE: "invalid",
    Refusal.REPLAY: "invalid",
    Refusal.SSRF: "invalid",
    Refusal.UNAUTHENTICATED: "auth-required",
    Refusal.NOT_MEMBER: "restricted",
    Refusal.RATE_LIMITED: "rate-limited",
}
BLOCKED: Final = "blocked"  # a key the service does not know at all: not approved, no member
ERROR: Final = "error"  # not the caller's doing
_POSITION: Final = re.compile(r"^events\[0\](?: \([0-9a-f]{12}…\))?: ")
_NOT_A_USER: Final = "is not approved and is not a member of any collection"
# A read stopped at the relay pool's statement_timeout (tms.relay.shared).
TOO_LONG: Final = (
    "error: this read took longer than this relay allows; ask for less (fewer filters, "
    "authors or ids, a narrower since/until, a smaller limit)"
)


def prefix(exc: BaseException) -> str:
    if not isinstance(exc, TMSError) or exc.refusal is None:
        return ERROR
    if isinstance(exc, NotAUser) or _NOT_A_USER in str(exc):
        return BLOCKED
    return PREFIXES.get(exc.refusal, "invalid")


def reason(exc: BaseException, fallback: str = "internal error") -> str:
    """`<prefix>: <SPEC's message>` for an OK or CLOSED."""
    text = _POSITION.sub("", str(exc), count=1) if isinstance(exc, TMSError) else fallback
    return sendable(f"{prefix(exc)}: {text}")


def failure(exc: BaseException) -> str:
    """What to tell the client of an error that is not its refusal (logged here)."""
    if isinstance(exc, TMSError):
        return reason(exc)
    if is_statement_timeout(exc):
        log.info("a relay read reached its statement timeout: %s", one_line(exc))
        return TOO_LONG
    if is_database_down(exc):
        log.warning("database unavailable on the relay: %s", one_line(exc))
        return f"error: {DATABASE_UNAVAILABLE}"
    log.error("internal error on the relay", exc_info=exc)
    return "error: internal error"
