"""The relay tests' server: a live `tms serve` over a database of its own per module, with one
collection (`rel`, owned by OWNER, MEMBER a member) and another (`other`, OWNER2's alone)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from factories import Live, fresh_database, live_server, settings
from relay_client import seed


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url, "tms_relay") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server
