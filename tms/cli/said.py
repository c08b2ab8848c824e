"""The CLI's one wire table: a failure that is no bug said as one line on stderr, after the
command's name (`tms: `, `tms mirror: `, `tms-sign: `), and its exit code.

A refusal, and any `TMSError`, in its own words (SPEC's); a database that cannot be used in the
words every door uses (`tms.errors.told`) with the driver's reason after them, for the operator;
an `OSError` (a file, a folder) in its own words. What a door's command does not expect (a bug)
it does not catch: its traceback is the report.
"""

from __future__ import annotations

import sys
from typing import Final

from tms.errors import Outcome, TMSError, one_line, outcome_of, told

FAILED: Final = 1  # what every command exits with when it failed (`tms fetch` and `tms mirror`: 2)


def line(exc: BaseException, by: str = "tms") -> str:
    """What the CLI says of a failure, after `by`."""
    if not isinstance(exc, TMSError) and outcome_of(exc) is Outcome.UNAVAILABLE:
        return f"{by}: {told(exc)} ({one_line(exc, 300)})"
    return f"{by}: {exc}"


def failed(exc: BaseException, by: str = "tms", code: int = FAILED) -> int:
    """Say `line(exc, by)` on stderr; the exit code."""
    print(line(exc, by), file=sys.stderr)
    return code
