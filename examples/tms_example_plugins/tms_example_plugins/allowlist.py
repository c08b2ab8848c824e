"""`allowlist`: evidence only from the hosts the operator lists.

A write policy, so it is asked about every event from every door (the pages, MCP, stdio, the
relay, the CLI) before the ledger commits: evidence (kind 4701) is accepted when its `url`'s
host is on `TMS_EVIDENCE_HOSTS` or a subdomain of one listed (`example.org` allows
`www.example.org`); evidence without a `url` names no source, so it is refused too. Other kinds
pass untouched.

Only `tms.extension` is imported from TMS: the stable surface (see docs/extending.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from tms.extension import ACCEPT, Event, Origin, Plugin, PluginError, Verdict, reject

NAME: Final = "allowlist"
SETTING: Final = "TMS_EVIDENCE_HOSTS"
KIND_EVIDENCE: Final = 4701
_HOST: Final = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def parse_hosts(text: str) -> frozenset[str]:
    """`TMS_EVIDENCE_HOSTS`: comma-separated host names, at least one."""
    hosts = set()
    for item in text.split(","):
        host = item.strip().lower().rstrip(".")
        if not host:
            continue
        if not _HOST.fullmatch(host) or len(host) > 253:
            raise PluginError(f"{SETTING} must be comma-separated host names, got {host!r:.80}")
        hosts.add(host)
    if not hosts:
        raise PluginError(f"{SETTING} is not set: list the hosts evidence may come from")
    return frozenset(hosts)


def host_of(url: object) -> str | None:
    """The URL's host, lowercased and without a trailing dot; None when there is none."""
    if not isinstance(url, str):
        return None
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return None
    return host.rstrip(".") if host else None


class EvidenceHosts:
    """The write policy itself: a callable object holding the list."""

    def __init__(self, hosts: frozenset[str]) -> None:
        self.hosts = hosts

    def allows(self, host: str) -> bool:
        return any(host == listed or host.endswith("." + listed) for listed in self.hosts)

    async def __call__(self, event: Event, origin: Origin) -> Verdict:
        if event.kind != KIND_EVIDENCE:
            return ACCEPT
        url = event.fields().get("url")
        if url is None:
            return reject("evidence must name its source: a url on this server's list of hosts")
        host = host_of(url)
        if host is None:
            return reject("evidence url has no host this server can check")
        if not self.allows(host):
            return reject(f"evidence from {host[:100]} is not accepted here: not a listed source")
        return ACCEPT


def plugin(environ: Mapping[str, str]) -> Plugin:
    """The entry point: the list is read once, at start-up."""
    hosts = parse_hosts(environ.get(SETTING, ""))
    return Plugin(NAME, write_policy=EvidenceHosts(hosts))
