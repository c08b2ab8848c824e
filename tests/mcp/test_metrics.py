"""`GET /metrics`: behind TMS_METRICS_TOKEN on the public port, open on TMS_METRICS_PORT, and
figures that move when requests, publishes, refusals and rate limits happen. Read from a live
server as Prometheus reads them (its own text parser).

The figures belong to the process, which the live servers of the whole test session share:
every check compares a scrape before with one after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import httpx
import pytest
from factories import (
    OWNER,
    Live,
    claim,
    evidence,
    free_port,
    fresh_database,
    link,
    live_server,
    members,
    settings,
    terms,
)
from mcp_helpers import Caller, approve
from prometheus_client.parser import text_string_to_metric_families

from tms.config import Settings
from tms.errors import ConfigError
from tms.metrics import database_label

TOKEN: Final = "scrape-me-0123456789abcdefghij"
BEARER: Final = {"Authorization": f"Bearer {TOKEN}"}
DOC: Final = "Histamine intolerance is thought to result from reduced diamine oxidase activity."

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, headers: dict[str, str] | None = None) -> Samples:
    response = httpx.get(f"{url}/metrics", headers=headers or BEARER, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    if headers is None:  # the public port's answer is never cached
        assert response.headers["cache-control"] == "no-store"
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def metered(pg_server_url: str, template_url: str) -> Iterator[Live]:
    """A live server with a metrics token, rate limits on for keys (to hit one), no vectors."""
    config = settings(TMS_METRICS_TOKEN=TOKEN, TMS_EMBED="off", TMS_RATE_KEY="40/minute")
    with (
        fresh_database(pg_server_url, template_url, "tms_metrics") as database,
        live_server(database, config) as live,
    ):
        yield live


def test_the_public_port_serves_metrics_to_the_token_only(metered: Live) -> None:
    """Without the token: 401 with a Bearer challenge (and a refusal noted); with it, the text
    format, the process's own figures among TMS's."""
    before = scrape(metered.url)
    for headers in (
        {},
        {"Authorization": "Bearer wrong-token-wrong-token-wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ):
        answer = httpx.get(f"{metered.url}/metrics", headers=headers, timeout=30)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == 'Bearer realm="metrics"'
        assert answer.json() == {"error": "metrics need Authorization: Bearer <TMS_METRICS_TOKEN>"}
        assert TOKEN not in answer.text
    after = scrape(metered.url)
    assert value(after, "process_resident_memory_bytes") > 0
    assert value(after, "tms_db_pool_max_connections", pool="main") >= 10  # summed
    assert value(after, "tms_db_pool_waiting", pool="publish") == 0
    assert (
        "tms_embedding_queue_depth",
        (("database", database_label(metered.database_url)),),
    ) in after
    assert value(after, "tms_relay_connections") >= 0
    for name, labels, added in (
        ("tms_requests_total", {"door": "ops", "outcome": "refused"}, 4),
        ("tms_requests_total", {"door": "ops", "outcome": "ok"}, 1),  # the first scrape
        ("tms_refusals_total", {"kind": "unauthenticated"}, 4),
    ):
        assert value(after, name, **labels) - value(before, name, **labels) == added, name


def test_the_series_an_operator_graphs(metered: Live) -> None:
    """No `*_created` timestamp beside every counter and histogram (some 120 series saying when
    the process started); a pool's limit is a gauge of its own, never a `state`; the embedding
    queue, one table every server on the database reports alike, names that database."""
    samples = scrape(metered.url)
    names = {name for name, _ in samples}
    assert not [name for name in names if name.endswith("_created")]
    assert {
        dict(labels).get("state") for name, labels in samples if name == "tms_db_pool_connections"
    } == {
        "in_use",
        "idle",
    }
    for pool in ("main", "export", "publish"):
        assert value(samples, "tms_db_pool_max_connections", pool=pool) >= 1
    queues = [dict(labels) for name, labels in samples if name == "tms_embedding_queue_depth"]
    assert {"database": database_label(metered.database_url)} in queues
    assert all(set(labels) == {"database"} for labels in queues)


def test_without_a_token_the_public_port_has_no_metrics(
    pg_server_url: str, template_url: str
) -> None:
    """No token and no metrics port: `/metrics` is the 404 of any unknown path. A metrics port
    serves them without a token, on 127.0.0.1, apart from the public port."""
    port = free_port()
    config = settings(TMS_EMBED="off", TMS_METRICS_PORT=str(port))
    with (
        fresh_database(pg_server_url, template_url, "tms_metrics") as database,
        live_server(database, config) as live,
    ):
        public = httpx.get(f"{live.url}/metrics", headers=BEARER, timeout=30)
        assert public.status_code == 404
        assert public.json() == httpx.get(f"{live.url}/nothing-here", timeout=30).json()
        private = scrape(f"http://127.0.0.1:{port}", {})
        assert value(private, "tms_db_pool_max_connections", pool="export") >= 1
    with pytest.raises(httpx.ConnectError):  # closed with the server
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_requests_publishes_refusals_and_rate_limits_move_the_figures(metered: Live) -> None:
    """A publish through the MCP door counts a request, a tool call, a publish's time and the
    events stored by kind; a refused publish counts as refused, in the refusal log's kinds
    too; a key over its rate limit counts as rate limited; an export without credentials as
    a refused request at its door."""
    caller = Caller(metered)
    try:
        approve(metered.database_url, OWNER)
        before = scrape(metered.url)
        doc = evidence(OWNER, "metered", DOC)
        said = claim(OWNER, "metered", "DAO explains HIT.")
        batch = [terms(OWNER), members(OWNER, "metered", []), doc, said]
        caller.publish(*batch, link(OWNER, "metered", doc["id"], said["id"], "diamine oxidase"))
        bad = link(OWNER, "metered", doc["id"], said["id"], "words it never says")
        assert "quote not found" in caller.error("publish", {"events": [bad]})
        assert httpx.get(f"{metered.url}/c/metered/export.jsonl", timeout=30).status_code == 401
        limited = 0
        for n in range(45):  # TMS_RATE_KEY=40/minute: the last ones are over
            result = caller.raw("publish", {"events": [claim(OWNER, "metered", f"c{n}")]})
            limited += bool(result.get("isError"))
        assert limited >= 1
        after = scrape(metered.url)
    finally:
        caller.close()

    def added(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert added("tms_events_stored_total", kind="claim") == 46 - limited
    assert added("tms_events_stored_total", kind="evidence") == 1
    assert added("tms_events_stored_total", kind="link") == 1
    assert added("tms_events_stored_total", kind="terms") == 1
    assert added("tms_publish_seconds_count", outcome="accepted") == 46 - limited
    assert added("tms_publish_seconds_count", outcome="refused") == 1 + limited
    assert added("tms_publish_seconds_sum", outcome="accepted") > 0
    assert added("tms_publish_batch_events_count") == 47
    assert added("tms_tool_calls_total", tool="publish", outcome="ok") == 46 - limited
    assert added("tms_tool_calls_total", tool="publish", outcome="refused") == 1 + limited
    assert added("tms_requests_total", door="mcp", outcome="ok") == 47  # JSON-RPC: all 200
    assert added("tms_requests_total", door="export", outcome="refused") == 1
    assert added("tms_refusals_total", kind="invalid") == 1  # the quote
    assert added("tms_refusals_total", kind="rate_limited") == limited
    assert added("tms_refusals_total", kind="unauthenticated") == 1  # the export
    assert added("tms_rate_limited_total", budget="key") == limited


def test_metrics_settings_are_checked_at_start_up() -> None:
    with pytest.raises(ConfigError, match="TMS_METRICS_TOKEN must be at least 24 characters"):
        Settings.from_env({"TMS_METRICS_TOKEN": "short"})
    with pytest.raises(ConfigError, match="TMS_METRICS_TOKEN"):
        Settings.from_env({"TMS_METRICS_TOKEN": "has spaces in it, which no header can carry"})
    with pytest.raises(ConfigError, match="TMS_METRICS_PORT must not be TMS_PORT"):
        Settings.from_env({"TMS_PORT": "8000", "TMS_METRICS_PORT": "8000"})
    with pytest.raises(ConfigError, match="TMS_METRICS_PORT must be"):
        Settings.from_env({"TMS_METRICS_PORT": "http"})
    chosen = Settings.from_env({"TMS_METRICS_TOKEN": TOKEN, "TMS_METRICS_PORT": "9464"})
    assert (chosen.metrics_token, chosen.metrics_port, chosen.metrics_host) == (
        TOKEN,
        9464,
        "127.0.0.1",
    )
