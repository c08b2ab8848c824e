"""Big bodies are counted in one budget for the process, across doors, until their batch is
stored (`tms.http.bodies.BigBodies`): with its slots taken by batches being submitted through
`/mcp` and the pages, the next big batch waits for one, whichever door it comes by; and once
every batch is answered, nothing is held."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from factories import OWNER, evidence, nip98_header, settings, terms
from publishing import publish

from tms.extension import Plugin
from tms.extension.api import ACCEPT, Event, Origin, Verdict
from tms.http.bodies import SMALL_BODY, BigBodies
from tms.ledger.service import Ledger
from tms.plugins.loading import BUILT_IN, Extensions, Loaded

pytestmark = pytest.mark.anyio

SERVER = "http://testserver"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
BIG_TEXT = "A long document, sentence after sentence. " * (SMALL_BODY // 40)  # over 1 MiB
GATE_SECONDS = 600  # the longest plugin deadline: longer than `until`'s guards, summed


@dataclass
class Gate:
    """A write policy that holds every evidence event until it is opened: the batches it
    holds are being submitted, their bodies read and parsed. It is given `GATE_SECONDS`, not
    the default 5 s: a batch the server's policy deadline rejected would end its submit and
    give its slot back while the test still counts it as held (on a loaded machine the other
    door's batch, its body inspected in a worker process just spawned, took longer than 5 s to
    reach the gate)."""

    opened: asyncio.Event
    entered: list[str]

    async def __call__(self, event: Event, origin: Origin) -> Verdict:
        if event.kind == 4701:
            self.entered.append(origin.door.value)
            await self.opened.wait()
        return ACCEPT


@dataclass
class Site:
    http: httpx.AsyncClient  # logged in as OWNER, with the pages' Origin and CSRF token
    big: BigBodies
    gate: Gate


@pytest.fixture
async def site(ledger: Ledger, db_url: str) -> AsyncIterator[Site]:
    from tms.app import create_app

    await ledger.approve([OWNER.pubkey])
    await publish(ledger, terms(OWNER))
    gate = Gate(asyncio.Event(), [])
    config = settings(TMS_EMBED="off", TMS_PLUGIN_TIMEOUT_SECONDS=str(GATE_SECONDS))
    extensions = Extensions(
        [Loaded(Plugin("gate", write_policy=gate), BUILT_IN)], config, environ={}
    )
    app = create_app(config, database_url=db_url, extensions=extensions)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=SERVER, timeout=60) as http,
    ):
        challenge = (await http.get("/login/challenge")).json()
        signed = OWNER.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        headers = {"Authorization": nip98_header(signed), "Origin": SERVER}
        assert (await http.post(challenge["url"], headers=headers)).status_code == 200
        home = (await http.get("/")).text
        csrf = home.split('name="tms-csrf" content="')[1].split('"')[0]
        http.headers.update({"Origin": SERVER, "X-CSRF-Token": csrf})
        try:
            yield Site(http, app.state.big_bodies, gate)
        finally:  # a test that failed with batches held: they are let through, not left waiting
            gate.opened.set()


def big_batch(number: int) -> list[dict[str, object]]:
    return [evidence(OWNER, "mcas", f"{number}: {BIG_TEXT}")]


async def by_mcp(http: httpx.AsyncClient, number: int) -> httpx.Response:
    call = {
        "jsonrpc": "2.0",
        "id": number,
        "method": "tools/call",
        "params": {"name": "publish", "arguments": {"events": big_batch(number)}},
    }
    return await http.post("/mcp", content=json.dumps(call), headers=HEADERS)


async def by_page(http: httpx.AsyncClient, number: int) -> httpx.Response:
    return await http.post("/publish", content=json.dumps({"events": big_batch(number)}))


async def until(condition: Callable[[], bool], site: Site) -> None:
    """Until `condition()` holds (each step yields to the app's tasks); a guard of 30 s, only
    so that a broken budget fails rather than hangs."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {site.gate.entered=} {site.big.held=} {site.big.waiting=}")


async def test_the_next_big_batch_waits_for_those_being_stored_across_doors(site: Site) -> None:
    big, gate = site.big, site.gate
    assert big.slots == 2 and big.held == 0
    first = asyncio.create_task(by_mcp(site.http, 1))
    second = asyncio.create_task(by_page(site.http, 2))
    await until(lambda: len(gate.entered) == 2, site)  # both parsed, and being submitted
    assert big.held == 2
    third = asyncio.create_task(by_page(site.http, 3))
    fourth = asyncio.create_task(by_mcp(site.http, 4))
    await until(lambda: big.waiting == 2, site)  # neither door's next batch is read meanwhile
    assert sorted(gate.entered) == ["mcp", "web"] and big.held == 2
    gate.opened.set()
    answers = await asyncio.gather(first, second, third, fourth)
    for answer in answers:
        assert answer.status_code == 200, answer.text
    for answer in (answers[1], answers[2]):
        assert len(answer.json()["accepted"]) == 1
    for answer in (answers[0], answers[3]):
        assert not answer.json()["result"].get("isError"), answer.text
    assert sorted(gate.entered) == ["mcp", "mcp", "web", "web"]
    assert (big.held, big.waiting) == (0, 0)


async def test_a_big_body_the_server_cannot_spill_is_no_database_outage(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big body's temporary file that cannot be written (a full disk, here a temporary folder
    gone) is said as such, 503 with Retry-After: before, every OSError read as the database
    down."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    answer = await by_page(site.http, 1)
    assert answer.status_code == 503
    assert answer.headers["Retry-After"]
    error = answer.json()["error"]
    assert "database" not in error
    assert error.startswith("the server has no room for this request body right now (")
    assert site.big.held == 0
