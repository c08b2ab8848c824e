"""Worker processes that end with their parent.

A pool's worker started by "spawn" waits on a queue whose other end it holds itself, so when the
server that started it dies without cleaning up (SIGKILL, the out-of-memory killer) it waits for
ever, and keeps multiprocessing's resource tracker alive with it: two orphans per pool, each
restart. A worker calls `exit_with_parent` first thing, and leaves within a second of its
parent, whatever killed it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Final

POLL_SECONDS: Final = 1.0


def exit_with_parent(poll_seconds: float = POLL_SECONDS) -> None:
    """Watch, from a daemon thread, for this process's parent to go (the process is then
    reparented, so its parent id changes), and exit at once when it does."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="tms-exit-with-parent", daemon=True).start()
