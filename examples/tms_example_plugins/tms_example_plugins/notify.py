"""`notify`: a webhook told of every batch the ledger commits.

An after-commit hook: TMS calls it once per committed batch, from a queue of its own, never
while a client waits; it POSTs `{"ids": [...], "collections": [...], "door": "..."}` to
`TMS_NOTIFY_URL` within `TMS_NOTIFY_TIMEOUT_SECONDS` (default 5). A webhook that is down, slow
or answers an error status makes the call fail: TMS logs and counts it, and the publish it
follows has long been answered. Nothing is retried: a notification, not a journal.

Only `tms.extension` is imported from TMS: the stable surface (see docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import httpx

from tms.extension import Committed, Plugin, PluginError

NAME: Final = "notify"
URL_SETTING: Final = "TMS_NOTIFY_URL"
TIMEOUT_SETTING: Final = "TMS_NOTIFY_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT_SECONDS: Final = 5.0


def parse_url(text: str) -> str:
    url = text.strip()
    if not url:
        raise PluginError(f"{URL_SETTING} is not set: the webhook to POST committed batches to")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PluginError(f"{URL_SETTING} must be an http:// or https:// URL, got {url!r:.100}")
    return url


def parse_timeout(text: str) -> float:
    if not text.strip():
        return DEFAULT_TIMEOUT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0.1 <= seconds <= 300:
        raise PluginError(f"{TIMEOUT_SETTING} must be seconds from 0.1 to 300, got {text!r:.40}")
    return seconds


class Webhook:
    """The hook: one POST per committed batch, on a connection of its own (no client outlives
    a call, so nothing is left open when the server stops)."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url = url
        self.seconds = seconds

    async def __call__(self, committed: Committed) -> None:
        body = {
            "ids": list(committed.ids),
            "collections": list(committed.collections),
            "door": str(committed.origin.door),
        }
        async with httpx.AsyncClient(timeout=self.seconds, trust_env=False) as client:
            response = await client.post(self.url, json=body)
            response.raise_for_status()


def plugin(environ: Mapping[str, str]) -> Plugin:
    """The entry point: the webhook and its timeout are read once, at start-up."""
    url = parse_url(environ.get(URL_SETTING, ""))
    seconds = parse_timeout(environ.get(TIMEOUT_SETTING, ""))
    return Plugin(NAME, after_commit=Webhook(url, seconds))
