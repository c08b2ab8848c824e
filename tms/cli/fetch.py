"""`tms fetch URL`: download a page or document as the ledger's `fetch_url` tool does and print
`{"url", "title", "chars", "text"}` as one JSON line; a refusal is one line on stderr, exit 2."""

from __future__ import annotations

import asyncio
import json
import sys

from tms.cli.said import failed
from tms.errors import TMSError


def fetch(url: str) -> int:
    from tms.fetch.client import fetch_url  # here, not above: its libraries take a second to import

    try:
        result = asyncio.run(fetch_url(url))
    except TMSError as exc:
        return failed(exc, code=2)
    line = json.dumps(result, ensure_ascii=False) + "\n"
    sys.stdout.flush()
    sys.stdout.buffer.write(line.encode("utf-8"))  # JSON is UTF-8, whatever the locale
    sys.stdout.buffer.flush()
    return 0
