"""The server's own log: one format for every line `tms serve` writes, TMS's (`tms.*`) and
uvicorn's alike, on stderr, at `TMS_LOG_LEVEL` (`--log-level`).

- text (the default): `2026-12-05T15:20:01.123Z INFO tms.runtime: vector search is ready (...)`;
- json (`TMS_LOG_FORMAT=json`): one object a line, `time`, `level`, `logger`, `message`, and
  when a line carries one, `exception` (its type, e.g. `ConnectionRefusedError`) and
  `traceback`; the access log's lines add `client`, `method`, `path` and `status`.

uvicorn's access log is off unless `TMS_ACCESS_LOG=on`; its lines then name the client as the
app resolved it (`TMS_TRUSTED_PROXIES`: the address a trusted proxy forwarded), not the proxy.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final, TextIO

from tms.config import Settings
from tms.guard import clients

LOGGERS: Final = ("tms", "uvicorn")  # uvicorn.error and uvicorn.access propagate to uvicorn
ACCESS: Final = "uvicorn.access"
ACCESS_FIELDS: Final = ("client", "method", "path", "version", "status")


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class TextFormat(logging.Formatter):
    """`time level logger: message`, then the traceback, if any, on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormat(logging.Formatter):
    """One JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.name == ACCESS and isinstance(record.args, tuple) and len(record.args) == 5:
            entry.update(zip(ACCESS_FIELDS, record.args, strict=True))
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class ForwardedClient(logging.Filter):
    """The access log's client as the app resolved it (`tms.http.gate`): uvicorn logs the
    response's start from inside the request's context, where the address is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        address = clients.CURRENT.get()
        if address is not None and isinstance(record.args, tuple) and record.args:
            record.args = (address, *record.args[1:])
        return True


def configure(settings: Settings, stream: TextIO | None = None) -> None:
    """Send `tms.*` and uvicorn's loggers to `stream` (stderr) in the settings' format and at
    their level; the `tms.upgrade` lines the commands print go the same way. Other libraries'
    loggers are left as they are (their warnings and errors reach Python's last resort)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormat() if settings.log_format == "json" else TextFormat())
    level = getattr(logging, settings.log_level.upper())
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    upgrade = logging.getLogger("tms.upgrade")  # as the commands set it up: now through `tms`
    for old in list(upgrade.handlers):
        upgrade.removeHandler(old)
    upgrade.propagate = True
    upgrade.setLevel(logging.NOTSET)
    access = logging.getLogger(ACCESS)
    access.handlers = []
    access.propagate = settings.access_log
    access.setLevel(level if settings.access_log else logging.CRITICAL + 1)
    if not any(isinstance(f, ForwardedClient) for f in access.filters):
        access.addFilter(ForwardedClient())
