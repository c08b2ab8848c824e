"""The two example plugins (examples/tms_example_plugins), each alone: the evidence-source
allow-list's decisions, and the notify hook's webhook against an HTTP server this test starts on
127.0.0.1 (up, failing, slow, down), loaded as an operator enables them (TMS_PLUGINS)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from factories import OWNER, free_port, settings, sign
from prometheus_client import REGISTRY
from tms_example_plugins.allowlist import EvidenceHosts, host_of, parse_hosts
from tms_example_plugins.notify import parse_timeout, parse_url
from webhook import Webhook, running

from tms.extension import ACCEPT, Committed, Door, Event, Origin, PluginError, reject
from tms.plugins.loading import Extensions, load_extensions
from tms.rules.admission import ACCEPTED, Action

pytestmark = pytest.mark.anyio

DOORS = [
    Origin(Door.WEB, OWNER.pubkey, "127.0.0.1"),
    Origin(Door.MCP, None, "::1"),
    Origin(Door.STDIO),
    Origin(Door.RELAY, None, "10.0.0.1"),
    Origin(Door.CLI),
]


def evidence(**fields: Any) -> Event:
    return Event(sign(OWNER, 4701, {"collection": "mcas", "text": "A text.", **fields}))


# --- allowlist -----------------------------------------------------------------------------------


async def test_the_allowlist_accepts_listed_hosts_and_their_subdomains_only() -> None:
    policy = EvidenceHosts(parse_hosts(" Example.org., pubmed.ncbi.nlm.nih.gov "))
    origin = DOORS[0]
    for url in (
        "https://example.org/a",
        "http://www.example.org:8080/x?y",
        "https://user@EXAMPLE.ORG./",
        "https://pubmed.ncbi.nlm.nih.gov/123/",
    ):
        assert await policy(evidence(url=url), origin) == ACCEPT, url
    assert await policy(evidence(url="https://evil-example.org/"), origin) == reject(
        "evidence from evil-example.org is not accepted here: not a listed source"
    )
    assert await policy(evidence(url="https://example.org.evil.net/"), origin) == reject(
        "evidence from example.org.evil.net is not accepted here: not a listed source"
    )
    assert await policy(evidence(), origin) == reject(
        "evidence must name its source: a url on this server's list of hosts"
    )
    assert await policy(evidence(url="mailto:someone"), origin) == reject(
        "evidence url has no host this server can check"
    )
    claim = Event(sign(OWNER, 4702, {"collection": "mcas", "text": "https://evil.net"}))
    assert await policy(claim, origin) == ACCEPT  # only evidence is judged


def test_the_allowlist_settings() -> None:
    assert parse_hosts("a.org,,b.org") == {"a.org", "b.org"}
    with pytest.raises(PluginError, match="TMS_EVIDENCE_HOSTS is not set"):
        parse_hosts(" , ")
    with pytest.raises(PluginError, match="TMS_EVIDENCE_HOSTS must be comma-separated host names"):
        parse_hosts("https://a.org/")
    assert host_of("https://[::1]:80/") == "::1" and host_of(42) is None


async def test_the_allowlist_meets_every_door_alike_as_an_enabled_plugin() -> None:
    config = settings(TMS_PLUGINS="allowlist")
    extensions = load_extensions(config, {"TMS_EVIDENCE_HOSTS": "example.org"})
    good = sign(OWNER, 4701, {"collection": "m", "text": "t", "url": "https://example.org"})
    bad = sign(OWNER, 4701, {"collection": "m", "text": "t", "url": "https://other.net"})
    for origin in DOORS:
        assert await extensions.admission.admit([good], origin) is ACCEPTED
        decision = await extensions.admission.admit([good, bad], origin)
        assert (decision.action, decision.policy) == (Action.REJECT, "allowlist")
        assert (decision.message, decision.event) == (
            "evidence from other.net is not accepted here: not a listed source",
            1,
        )


# --- notify --------------------------------------------------------------------------------------


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    with running() as hook:
        yield hook


def notify(url: str, timeout: str = "2") -> Extensions:
    config = settings(TMS_PLUGINS="notify", TMS_HOOK_TIMEOUT_SECONDS="5")
    return load_extensions(config, {"TMS_NOTIFY_URL": url, "TMS_NOTIFY_TIMEOUT_SECONDS": timeout})


def outcome(name: str) -> float:
    labels = {"plugin": "notify", "outcome": name}
    return REGISTRY.get_sample_value("tms_plugin_hook_batches_total", labels) or 0.0


async def test_notify_posts_each_committed_batch(webhook: Webhook) -> None:
    extensions = notify(webhook.url)
    first = Committed(("a" * 64, "b" * 64), ("mcas",), DOORS[1])
    second = Committed(("c" * 64,), ("mcas", "other"), DOORS[2])
    async with extensions.running():
        clock = time.monotonic()
        extensions.after_commit.submit(first)
        extensions.after_commit.submit(second)
        assert time.monotonic() - clock < 0.05  # the caller never waits for the webhook
        bodies = await webhook.received(2)
    assert bodies == [
        {"path": "/hook", "type": "application/json", "ids": ["a" * 64, "b" * 64],
         "collections": ["mcas"], "door": "mcp"},
        {"path": "/hook", "type": "application/json", "ids": ["c" * 64],
         "collections": ["mcas", "other"], "door": "stdio"},
    ]  # fmt: skip


async def test_a_failing_slow_or_missing_webhook_is_counted_never_raised(
    webhook: Webhook,
) -> None:
    batch = Committed(("a" * 64,), ("mcas",), DOORS[0])
    failed, done = outcome("failed"), outcome("done")
    webhook.status = 500
    extensions = notify(webhook.url, timeout="0.3")
    async with extensions.running():
        extensions.after_commit.submit(batch)  # answered 500
        await webhook.received(1)
        webhook.status, webhook.delay = 204, 1.0
        extensions.after_commit.submit(batch)  # answered too late
        await webhook.received(2)
    assert outcome("failed") == failed + 2
    down = notify(f"http://127.0.0.1:{free_port()}/hook")
    async with down.running():
        down.after_commit.submit(batch)  # nobody listens
    assert outcome("failed") == failed + 3
    assert outcome("done") == done


def test_the_notify_settings() -> None:
    assert parse_url(" http://127.0.0.1:9/x ") == "http://127.0.0.1:9/x"
    with pytest.raises(PluginError, match="TMS_NOTIFY_URL is not set"):
        parse_url("")
    with pytest.raises(PluginError, match="TMS_NOTIFY_URL must be an http"):
        parse_url("ftp://127.0.0.1/")
    assert parse_timeout("") == 5.0 and parse_timeout("0.5") == 0.5
    with pytest.raises(PluginError, match="TMS_NOTIFY_TIMEOUT_SECONDS must be seconds"):
        parse_timeout("never")
