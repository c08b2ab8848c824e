"""What the operator says about witnesses, read once at start-up so that a bad file stops the
server with one line, not half-way through a submission.

- `TMS_WITNESS_POLICY`: a C2SP tlog-policy file. Its witnesses with a URL are where this
  server submits each collection's newest checkpoint; its quorum is what the pages and
  `get_checkpoint` say is met or not. Unset: no witnessing.
- `TMS_WITNESS_LOGS`: a file of `log <origin> <vkey>` lines, the logs this server witnesses
  (an origin ending in `/` covers every origin it prefixes). Unset: it witnesses none, and
  `POST /witness/add-checkpoint` answers 404 for every origin, as the protocol says.
- `TMS_WITNESS_KEY`: this server's witness key (`PRIVATE+KEY+<name>+<id>+<seed>`, type 0x04);
  unset, it is generated into `TMS_DATA_DIR/witness-key` the first time it is needed, named
  `<log host>/witness`. Like the log key it must outlive the process: the logs' policies name
  its public half.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from tms.config import Settings
from tms.errors import ConfigError, LogError
from tms.tlog.cosignature import CosignerKey
from tms.tlog.policy import Policy
from tms.tlog.witness import TrustedLogs

WITNESS_KEY_FILE: Final = "witness-key"
MAX_FILE_BYTES: Final = 1024 * 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WitnessSettings:
    policy: Policy | None  # whom this server's checkpoints go to; None: nobody
    logs: TrustedLogs  # whom this server witnesses
    key: CosignerKey | None  # its witness key; None when it witnesses no log

    @classmethod
    def load(cls, settings: Settings) -> WitnessSettings:
        policy = settings.witness_policy
        logs = settings.witness_logs
        key = None
        if logs is not None:
            key = _witness_key(settings.witness_key, settings.data_dir, settings.log_host)
        return cls(
            _read(policy, "TMS_WITNESS_POLICY", Policy.parse) if policy else None,
            _read(logs, "TMS_WITNESS_LOGS", TrustedLogs.parse) if logs else TrustedLogs(),
            key,
        )


def _read(path: str, name: str, parse: Callable[[str], T]) -> T:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(MAX_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{name}: cannot read {path}: {exc}") from None
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError(f"{name}: {path} is over {MAX_FILE_BYTES:,} bytes")
    try:
        return parse(text)
    except LogError as exc:
        raise ConfigError(f"{name}: {path}: {exc}") from None


def _witness_key(value: str | None, data_dir: Path, log_host: str) -> CosignerKey:
    """`TMS_WITNESS_KEY`, else the data directory's `witness-key`, made on first use."""
    if value:
        try:
            return CosignerKey.parse(value)
        except LogError as exc:
            raise ConfigError(f"TMS_WITNESS_KEY: {exc}") from None
    path = data_dir / WITNESS_KEY_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return CosignerKey.parse(path.read_text("ascii"))
        key = CosignerKey.generate(f"{log_host}/witness")
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(key.encode() + "\n")
        return key
    except LogError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read or create the witness key {path}: {exc}") from None
