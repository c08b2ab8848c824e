"""The MCP tests' server: a live `tms serve` over a database of its own, one per test module
(a module may define its own `live`), and a caller that signs requests to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from factories import Live, fresh_database, live_server
from mcp_helpers import Caller


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url) as database, live_server(database) as server:
        yield server


@pytest.fixture(scope="module")
def caller(live: Live) -> Iterator[Caller]:
    c = Caller(live)
    yield c
    c.close()
