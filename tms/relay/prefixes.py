"""The relay's wire table: a failure said after NIP-01's machine-readable prefix.

Every failure is classified once (`tms.errors.outcome_of`). A refusal is said in SPEC's words
(`tms.errors.told`) after the prefix its kind calls for (`tms.errors.Refusal`), or `blocked:`
for a key the service does not know at all and for an operator's write policy, whatever kind
the refusal log files them under; a one-event batch's refusal is said without the event's place
in the batch (`PublishError.alone`): the OK names the event already. A database that cannot be
used is `error:` with `DATABASE_UNAVAILABLE`, and anything else `error:` with `INTERNAL_ERROR`
(logged here, with its details). A read stopped at the relay pool's statement timeout is the
relay's own: the client asked too much.
"""

from __future__ import annotations

import logging
from typing import Final

from tms.errors import (
    Blocked,
    NotAUser,
    Outcome,
    PublishError,
    Refusal,
    TMSError,
    UnknownSigner,
    one_line,
    outcome_of,
    sendable,
    told,
)
from tms.ledger import is_statement_timeout

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
    Refusal.BLOCKED: "blocked",
}
BLOCKED: Final = "blocked"
# Said `blocked:` by their class: a key the service does not know at all (not approved, no
# member anywhere), filed as NOT_MEMBER, and what an operator's write policy refused.
BLOCKED_CLASSES: Final = (NotAUser, UnknownSigner, Blocked)
ERROR: Final = "error"  # not the caller's doing
# A read stopped at the relay pool's statement_timeout (tms.relay.shared).
TOO_LONG: Final = (
    "error: this read took longer than this relay allows; ask for less (fewer filters, "
    "authors or ids, a narrower since/until, a smaller limit)"
)


def prefix(exc: BaseException) -> str:
    if outcome_of(exc) is not Outcome.REFUSED or not isinstance(exc, TMSError):
        return ERROR
    if isinstance(exc, BLOCKED_CLASSES):
        return BLOCKED
    if exc.refusal is None:
        return ERROR
    return PREFIXES.get(exc.refusal, "invalid")


def reason(exc: BaseException) -> str:
    """`<prefix>: <SPEC's message>` for an OK or CLOSED."""
    if isinstance(exc, PublishError) and outcome_of(exc) is Outcome.REFUSED:
        return sendable(f"{prefix(exc)}: {exc.alone}")
    return f"{prefix(exc)}: {told(exc)}"


def failure(exc: BaseException) -> str:
    """What to tell the client of any failure (one that is not its refusal is logged here)."""
    outcome = outcome_of(exc)
    if outcome is Outcome.REFUSED:
        return reason(exc)
    if is_statement_timeout(exc):
        log.info("a relay read reached its statement timeout: %s", one_line(exc))
        return TOO_LONG
    if outcome is Outcome.UNAVAILABLE:
        log.warning("database unavailable on the relay: %s", one_line(exc))
    else:
        log.error("internal error on the relay", exc_info=exc)
    return f"{ERROR}: {told(exc)}"
