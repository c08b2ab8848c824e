"""What `tms serve` and `tms stdio` open (`tms.runtime.open_runtime`) says and keeps at start-up
(issue 34 item 8): with TMS_EMBED=off nothing is queued for vectors (the queue's depth used to
grow without bound, nothing taking it off); the queue's depth is labelled with which database it
is (every embedded database is called `tms`); an older release of TMS still connected is named
in the log."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg
import pytest
from factories import MEMBER, OWNER, claim, database_name, settings
from publishing import open_collection, publish

from tms import metrics
from tms.ledger.service import Ledger
from tms.runtime import open_runtime
from tms.store.database import newest_schema

pytestmark = pytest.mark.anyio


async def test_with_embedding_off_nothing_is_queued_and_the_label_names_the_database(
    db_url: str, ledger: Ledger
) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    async with open_runtime(settings(TMS_EMBED="off"), database_url=db_url) as runtime:
        await publish(runtime.ledger, claim(OWNER, "lab", "Queued for nothing?"))
        assert await ledger.pool.fetchval("SELECT count(*) FROM embedding_queue") == 0
        await metrics.refresh(runtime.ledger.pool)
    label = metrics.database_label(db_url)
    assert label.endswith(f"/{database_name(db_url)}")  # host:port (or socket dir:port)/name
    assert metrics.EMBEDDING_QUEUE.labels(label)._value.get() == 0


def test_the_database_label_tells_databases_apart() -> None:
    assert metrics.database_label("postgresql://u:secret@db.example:6432/ledger") == (
        "db.example:6432/ledger"
    )
    assert metrics.database_label("postgresql://u@/tms?host=/run/pg") == "/run/pg:5432/tms"
    assert metrics.database_label("postgresql://u@/tms?host=/x", Path("/srv/a")) == "/srv/a"


async def test_an_older_release_connected_is_named(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    old = await asyncpg.connect(
        db_url, server_settings={"application_name": f"tms 0.0.1 schema {newest_schema():03d} main"}
    )
    try:
        with caplog.at_level(logging.WARNING, "tms.store.database"):
            async with open_runtime(settings(TMS_EMBED="off"), database_url=db_url):
                pass
    finally:
        await old.close()
    [said] = [r.getMessage() for r in caplog.records if "older TMS releases" in r.getMessage()]
    # "from local" over a socket (the embedded server), "from 127.0.0.1" over TCP (a cluster)
    assert said.startswith(
        f"older TMS releases are connected to this database (tms 0.0.1 schema "
        f"{newest_schema():03d} main from "
    )
    assert "(1 connection)): this is tms " in said
