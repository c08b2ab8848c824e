"""`tms mirror RELAY_URL --dir DIR [--nsec NSEC] [--once] [--push] [--policy FILE] [--key KEY]`:
keep a member's verified copy of one collection (`tms.mirror`).

The key is `--nsec`, else `TMS_NSEC` (an nsec or 64 hex characters; the environment keeps it
out of the process list). Exit 0: synced (`--once`), or followed until interrupted; 1: the
server's history does not match the copy or its checkpoints (the copy is left as it was);
2: the mirror could not run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tms.cli.said import failed
from tms.errors import TMSError
from tms.mirror.sync import Mirror, Target, run_mirror
from tms.nostr.events import SecretKey
from tms.nostr.keys import parse_secret
from tms.tlog.policy import Policy


def mirror(
    relay: str,
    directory: str,
    *,
    nsec: str | None,
    once: bool,
    push: bool,
    policy_path: str | None,
    log_key: str | None,
) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr if line.startswith("tms mirror:") else sys.stdout, flush=True)

    try:
        key = _key(nsec if nsec is not None else os.environ.get("TMS_NSEC", ""))
        policy = None
        if policy_path is not None:
            with open(policy_path, encoding="utf-8") as file:
                policy = Policy.parse(file.read(1024 * 1024))
        runner = Mirror(
            Target.of(relay),
            key,
            Path(directory),
            policy=policy,
            log_key=log_key,
            push=push,
            say=say,
        )
    except (TMSError, OSError) as exc:
        return failed(exc, "tms mirror", 2)
    try:
        return asyncio.run(run_mirror(runner, once=once))
    except KeyboardInterrupt:
        return 0


def _key(value: str) -> SecretKey:
    if not value.strip():
        raise TMSError("no key: give --nsec, or set TMS_NSEC (an nsec1... or 64 hex characters)")
    return parse_secret(value)
