"""Plugins in a live `tms serve` (the real command, a subprocess), enabled by TMS_PLUGINS as an
operator enables them: the allow-list example plugin, a test plugin installed as a package of its
own (`quirks.py`: it shadow-rejects, raises, filters reads, and adds tools, a prompt and routes),
the notify example plugin posting to a webhook this module runs on 127.0.0.1, and the built-in
strfry adapter running a strfry-style script (`strfry_script.py`).

Every door meets the same write policy with the same words: the pages' submit form in headless
Chromium, MCP over HTTP and `tms stdio` through the MCP SDK's own client, the relay through
nostr-tools' Relay. A shadow-rejected batch looks stored and is not; a policy that raises refuses
cleanly; a batch with one refused event stores nothing; each committed batch, and only those,
reaches the webhook. The strfry adapter judges a 1,000-event batch. A plugin's tool is called over
MCP with a signed request, under the core's rules, and refused for a collection its key cannot
read or its read filter seals; its prompt and routes are served. One server for the module."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
import pytest
from factories import (
    ASSETS,
    LOG_SIGNER,
    MEMBER,
    OWNER,
    STRANGER,
    TMS,
    UNLIMITED,
    EventDict,
    Live,
    claim,
    environment,
    evidence,
    free_port,
    fresh_database,
    members,
    nip98_auth,
    request,
    terms,
    where,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from playwright.sync_api import expect, sync_playwright
from webhook import Webhook, running

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pages"))  # the browser's helpers
from browser import CHROMIUM, CHROMIUM_ARGS, Relay, open_person, ready

HERE: Final = Path(__file__).parent
PLUGINS: Final = "allowlist,quirks,notify,strfry"
WORDS: Final = "evidence from other.net is not accepted here: not a listed source"
FAILED: Final = "write policy 'quirks' failed; the server's log has the details"
SEALED: Final = "collection 'sealed' is sealed by the quirks plugin"
TOKEN: Final = "metrics-" * 4
NODE_SECONDS: Final = 120
NEVER_STORED: list[str] = []  # ids refused or shadow-rejected by the tests: never notified


@dataclass(frozen=True)
class Plugged:
    live: Live
    env: dict[str, str]  # the server's environment (its plugins): `tms stdio` runs with it too
    webhook: Webhook
    notes: Path  # what the strfry script was asked
    log: Path  # the server's output


def install_quirks(root: Path) -> Path:
    """`quirks.py` as an installed package declaring it in `tms.plugins`: a distribution in a
    folder the server's PYTHONPATH names, which is what an installed package is to
    `importlib.metadata`."""
    folder = root / "site"
    info = folder / "tms_test_quirks-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tms-test-quirks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tms.plugins]\nquirks = quirks_plugin:plugin\n")
    shutil.copyfile(HERE / "quirks.py", folder / "quirks_plugin.py")
    return folder


async def seed(url: str) -> None:
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        ledger = Ledger(pool)
        await ledger.approve([OWNER.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                members(OWNER, "lab", [MEMBER.pubkey]),
                members(OWNER, "sealed", [MEMBER.pubkey]),
                terms(MEMBER),
                claim(MEMBER, "sealed", "A claim kept under seal."),
            ],
            origin=OPERATOR,
        )
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def profiles() -> Iterator[Relay]:
    """The relay the pages look profiles up on (never one on the internet)."""
    with Relay().running() as relay:
        yield relay


@pytest.fixture(scope="module")
def plugged(
    pg_server_url: str,
    template_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    profiles: Relay,
) -> Iterator[Plugged]:
    root = tmp_path_factory.mktemp("plugins-live")
    notes = root / "strfry-notes.jsonl"
    with (
        fresh_database(pg_server_url, template_url, "tms_plugins") as database,
        running() as webhook,
    ):
        asyncio.run(seed(database))
        env = environment(
            TMS_DATABASE_URL=database,
            TMS_DATA_DIR=str(root / "data"),
            TMS_EMBED="off",
            TMS_LOG_KEY=LOG_SIGNER.encode(),
            TMS_SECRET="plugins-" * 6,
            TMS_METRICS_TOKEN=TOKEN,
            TMS_PROFILE_RELAYS=profiles.url,
            TMS_PLUGINS=PLUGINS,
            TMS_EVIDENCE_HOSTS="example.org",
            TMS_NOTIFY_URL=webhook.url,
            TMS_STRFRY_COMMAND=f"{shlex.quote(sys.executable)} {HERE / 'strfry_script.py'} {notes}",
            PYTHONPATH=str(install_quirks(root)),
            **UNLIMITED,
        )
        port = free_port()
        log = root / "server.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [TMS, "serve", "--port", str(port)], env=env, stdout=out, stderr=out
            )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait(server, url, log)
            yield Plugged(Live(url, database), env, webhook, notes, log)
        finally:
            server.terminate()
            assert server.wait(30) == 0, log.read_text()


def _wait(server: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, log.read_text()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        assert time.monotonic() < deadline, "tms serve did not answer within 60 s"
        time.sleep(0.1)


def now() -> int:
    return int(time.time())


def outsider(text: str) -> EventDict:
    """Evidence from a host the allow-list does not list."""
    return evidence(MEMBER, "lab", text, url="https://other.net/paper", created_at=now())


def fresh(text: str) -> EventDict:
    return claim(MEMBER, "lab", f"{text} ({time.time_ns()})", created_at=now())


async def stored(live: Live, events: Sequence[EventDict]) -> list[str]:
    conn = await asyncpg.connect(live.database_url)
    try:
        rows = await conn.fetch(
            "SELECT id FROM events WHERE id = ANY($1::text[])", [e["id"] for e in events]
        )
    finally:
        await conn.close()
    return sorted(row["id"] for row in rows)


def text_of(result: Any) -> str:
    assert result.is_error, result
    said: str = result.content[0].text
    return said


def structured(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def posted(webhook: Webhook, event_id: str) -> dict[str, Any]:
    """The webhook's body naming `event_id`, once it came."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for body in list(webhook.bodies):
            if event_id in body["ids"]:
                return body
        await asyncio.sleep(0.02)
    raise AssertionError(f"no webhook body named {event_id}: {webhook.bodies}")


def metric(live: Live, line_start: str) -> float:
    scraped = httpx.get(f"{live.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200, scraped.text
    for line in scraped.text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {line_start} in /metrics")


# --- every door, one write policy ---------------------------------------------------------------


@pytest.mark.anyio
async def test_mcp_over_http_meets_the_policy_and_a_refused_batch_stores_nothing(
    plugged: Plugged,
) -> None:
    bad, good = outsider("A paper from elsewhere."), fresh("A claim beside it.")
    NEVER_STORED.extend([bad["id"], good["id"]])
    async with Client(plugged.live.mcp) as client:
        alone = await client.call_tool("publish", {"events": [bad]})
        assert text_of(alone) == f"{where(0, bad)}: {WORDS}"
        batch = await client.call_tool("publish", {"events": [good, bad]})
        assert text_of(batch) == f"{where(1, bad)}: {WORDS}"
        assert await stored(plugged.live, [bad, good]) == []
        listed = evidence(
            MEMBER, "lab", "A paper from a listed host.", url="https://www.example.org/a"
        )
        accepted = structured(await client.call_tool("publish", {"events": [listed]}))
        assert accepted["accepted"] == [listed["id"]]
    assert await posted(plugged.webhook, listed["id"]) == {
        "path": "/hook",
        "type": "application/json",
        "ids": [listed["id"]],
        "collections": ["lab"],
        "door": "mcp",
    }


@pytest.mark.anyio
async def test_stdio_meets_the_policy(plugged: Plugged) -> None:
    bad, good = outsider("A paper over stdio."), fresh("A claim over stdio.")
    NEVER_STORED.append(bad["id"])
    server = StdioServerParameters(command=TMS, args=["stdio"], env=plugged.env)
    async with Client(server) as client:
        refused = await client.call_tool("publish", {"events": [bad]})
        assert text_of(refused) == f"{where(0, bad)}: {WORDS}"
        accepted = structured(await client.call_tool("publish", {"events": [good]}))
        assert accepted["accepted"] == [good["id"]]
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"quirks_echo", "quirks_whoami"} <= tools  # a plugin's tools, over stdio too
    assert await stored(plugged.live, [bad]) == []
    assert (await posted(plugged.webhook, good["id"]))["door"] == "stdio"


def test_the_relay_meets_the_policies_through_nostr_tools(
    plugged: Plugged, js_current_packages: Path
) -> None:
    """One EVENT each: the allow-list's refusal, the quirks plugin's shadow-rejection and its
    failure, the strfry script's shadow-rejection and refusal, and one accepted; then a REQ the
    read filter refuses."""
    bad = outsider("A paper over the relay.")
    hushed = fresh("A claim to hush.")
    exploding = fresh("A claim to explode.")
    shadowed = claim(MEMBER, "lab", "shadow", created_at=now())
    strfry_refused = claim(MEMBER, "lab", "reject:blocked: not from this relay", created_at=now())
    fine = fresh("A claim over the relay.")
    events = [bad, hushed, exploding, shadowed, strfry_refused, fine]
    NEVER_STORED.extend(e["id"] for e in events[:-1])
    shutil.copyfile(ASSETS / "plugin_doors.mjs", js_current_packages / "plugin_doors.mjs")
    result = subprocess.run(
        ["node", "--experimental-websocket", "plugin_doors.mjs"],
        cwd=js_current_packages,
        env=environment(
            RELAY_BASE=plugged.live.url,
            MEMBER_HEX=MEMBER.secret.hex(),
            EVENTS_JSON=json.dumps(events),
        ),
        capture_output=True,
        text=True,
        timeout=NODE_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["published"] == [
        {"ok": False, "reason": f"blocked: {WORDS}"},
        {"ok": True, "reason": ""},  # shadow-rejected: told it was stored
        {"ok": False, "reason": f"blocked: {FAILED}"},
        {"ok": True, "reason": ""},  # shadow-rejected by the strfry script
        {"ok": False, "reason": "blocked: not from this relay"},
        {"ok": True, "reason": ""},
    ]
    assert seen["closed"] == f"blocked: {SEALED}"
    assert asyncio.run(stored(plugged.live, events)) == [fine["id"]]
    assert asyncio.run(posted(plugged.webhook, fine["id"]))["door"] == "relay"


def test_the_pages_meet_the_policy_in_chromium(plugged: Plugged) -> None:
    """The submit form: evidence from an unlisted host, a claim and a link, signed by the
    NIP-07 extension; the page says the policy's words and that nothing was stored."""
    text = f"A study that the allow-list refuses ({time.time_ns()})."
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            person = open_person(chromium, MEMBER)
            page = person.page
            page.goto(plugged.live.url + "/")
            ready(page)
            page.click("#connect-button")
            expect(page.locator("#logout")).to_be_visible()
            page.goto(f"{plugged.live.url}/submit?c=lab")
            ready(page)
            page.fill("#url", "https://other.net/study")
            page.fill("#text", text)
            row = page.locator("#rows .row").first
            row.locator(".claim").fill("The allow-list refuses this study.")
            row.locator(".quote").fill("the allow-list refuses")
            row.locator(".reason").fill("It says so.")
            page.click("#publish")
            status = page.locator("#publish-status")
            expect(status).to_contain_text("Refused: nothing was stored.")
            # The policy's words beside the evidence they refuse, not an envelope's index
            expect(page.locator("#evidence-check")).to_contain_text(WORDS)
            assert [e["kind"] for e in person.signed] == [27235, 4701, 4702, 4703]
            person.close()
        finally:
            chromium.close()
    NEVER_STORED.extend(e["id"] for e in person.signed[1:])
    assert asyncio.run(stored(plugged.live, person.signed[1:])) == []


# --- shadow-rejection, a failing policy, strfry's protocol --------------------------------------


@pytest.mark.anyio
async def test_a_shadow_rejected_batch_looks_stored_and_is_not(plugged: Plugged) -> None:
    hushed, beside = fresh("Please hush this."), fresh("A claim in the same batch.")
    NEVER_STORED.extend([hushed["id"], beside["id"]])
    async with Client(plugged.live.mcp) as client:
        said = structured(await client.call_tool("publish", {"events": [beside, hushed]}))
    assert said["accepted"] == [beside["id"], hushed["id"]]
    assert said["collections"] == ["lab"] and said["skipped"] == []
    assert await stored(plugged.live, [hushed, beside]) == []


@pytest.mark.anyio
async def test_a_policy_that_raises_refuses_cleanly_and_is_counted(plugged: Plugged) -> None:
    labels = 'tms_plugin_failures_total{cause="raised",plugin="quirks",seam="write_policy"}'
    before = metric(plugged.live, labels)
    exploding = fresh("This one will explode.")
    NEVER_STORED.append(exploding["id"])
    async with Client(plugged.live.mcp) as client:
        refused = await client.call_tool("publish", {"events": [exploding]})
        assert text_of(refused) == f"{where(0, exploding)}: {FAILED}"
        still = fresh("The server goes on.")
        assert structured(await client.call_tool("publish", {"events": [still]}))["accepted"]
    assert metric(plugged.live, labels) == before + 1
    assert "the quirks policy blew up (on purpose)" in plugged.log.read_text()  # the log has it
    assert await stored(plugged.live, [exploding]) == []


@pytest.mark.anyio
async def test_the_strfry_adapter_judges_a_thousand_events(plugged: Plugged) -> None:
    base = now()
    batch = [claim(MEMBER, "lab", f"Claim {n}, stored.", created_at=base) for n in range(1000)]
    refused = [claim(MEMBER, "lab", f"Claim {n}, refused.", created_at=base) for n in range(1000)]
    refused[700] = claim(MEMBER, "lab", "reject:not this one", created_at=base)
    NEVER_STORED.extend(e["id"] for e in refused)
    async with Client(plugged.live.mcp) as client:
        said = structured(await client.call_tool("publish", {"events": batch}))
        assert len(said["accepted"]) == 1000
        failed = await client.call_tool("publish", {"events": refused})
        assert text_of(failed) == f"{where(700, refused[700])}: not this one"
    assert len(await stored(plugged.live, batch)) == 1000
    assert await stored(plugged.live, refused) == []
    notes = [json.loads(line) for line in plugged.notes.read_text().splitlines()[:-1] if line]
    asked = {note["event"]["id"]: note for note in notes if "type" in note}
    assert all(event["id"] in asked for event in batch)
    request_seen = asked[batch[0]["id"]]
    assert (request_seen["type"], request_seen["sourceType"]) == ("new", "IP4")
    assert request_seen["sourceInfo"] == "127.0.0.1" and "authed" not in request_seen
    assert all(note["tms"] == [] for note in notes if "started" in note)  # no TMS_* secrets
    body = await posted(plugged.webhook, batch[0]["id"])
    assert body["ids"] == [event["id"] for event in batch]  # one batch, one notification


# --- a plugin's tool, prompt and routes -----------------------------------------------------------


@pytest.mark.anyio
async def test_a_plugin_tool_under_the_cores_rules(plugged: Plugged) -> None:
    async with Client(plugged.live.mcp) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert len(listed) == 15 and {"quirks_echo", "quirks_whoami"} <= set(listed)
        schema = listed["quirks_echo"].input_schema
        assert schema["required"] == ["request"]
        described = schema["properties"]["request"]["description"]
        assert described.endswith(
            "args: `collection` (required) the collection's slug; `say` (optional)"
        )

        async def call(key: Any, tool: str, **args: Any) -> Any:
            return await client.call_tool(tool, {"request": request(key, tool, **args)})

        echoed = structured(await call(MEMBER, "quirks_echo", collection="lab", say="hi"))
        assert echoed == {
            "caller": MEMBER.pubkey,
            "collections": ["lab"],
            "args": {"collection": "lab", "say": "hi"},
        }
        # a collection the key cannot read: the core's own refusal, as for a core tool
        theirs = text_of(await call(STRANGER, "quirks_echo", collection="lab"))
        assert theirs == text_of(await call(STRANGER, "list_claims", collection="lab"))
        missing = text_of(await call(MEMBER, "quirks_echo", collection="nowhere"))
        assert missing == text_of(await call(MEMBER, "list_claims", collection="nowhere"))
        # a collection the key reads, sealed by the read filter: the plugin's and the core's
        assert text_of(await call(MEMBER, "quirks_echo", collection="sealed")) == SEALED
        assert text_of(await call(MEMBER, "list_claims", collection="sealed")) == SEALED
        # its schema, its own refusal, the signed request's rules
        wrong = text_of(await call(MEMBER, "quirks_echo", collection="lab", say=5))
        assert wrong == "quirks_echo args: say: 5 is not of type 'string'"
        no = text_of(await call(MEMBER, "quirks_echo", collection="lab", say="no"))
        assert no == "quirks_echo will not say no"
        unsigned = text_of(await client.call_tool("quirks_echo", {}))
        assert "needs a signed `request`" in unsigned
        loose = text_of(await client.call_tool("quirks_echo", {"collection": "lab"}))
        assert loose.startswith("quirks_echo takes only a signed `request`")
        once = request(MEMBER, "quirks_echo", collection="lab")
        assert structured(await client.call_tool("quirks_echo", {"request": once}))
        replayed = text_of(await client.call_tool("quirks_echo", {"request": once}))
        assert replayed == text_of(await client.call_tool("quirks_echo", {"request": once}))
        assert "used" in replayed
        elsewhere = request(MEMBER, "list_claims", collection="lab")
        assert "list_claims" in text_of(
            await client.call_tool("quirks_echo", {"request": elsewhere})
        )
        whoami = structured(await call(MEMBER, "quirks_whoami"))
        assert whoami == {"result": MEMBER.pubkey}

        prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}
        assert set(prompts) == {"claims_pass", "briefing", "quirks_review"}
        [topic] = prompts["quirks_review"].arguments or []
        assert (topic.name, topic.required) == ("topic", True)
        review = await client.get_prompt("quirks_review", {"topic": "DAO"})
        assert review.messages[0].content.text == "Review the claims about DAO."
        with pytest.raises(Exception, match="prompt 'quirks_review' needs `topic`"):
            await client.get_prompt("quirks_review", {})
    ok = 'tms_tool_calls_total{outcome="ok",tool="quirks_echo"}'
    refused = 'tms_tool_calls_total{outcome="refused",tool="quirks_echo"}'
    assert metric(plugged.live, ok) >= 2 and metric(plugged.live, refused) >= 6


def test_a_plugins_routes_behind_their_auth(plugged: Plugged) -> None:
    base = f"{plugged.live.url}/plugins/quirks"
    assert httpx.get(f"{base}/hello").json() == {"hello": "world", "pubkey": None}
    assert httpx.get(f"{base}/me").status_code == 401
    signed = httpx.get(f"{base}/me", headers=nip98_auth(MEMBER, f"{base}/me"))
    assert signed.json() == {"hello": "world", "pubkey": MEMBER.pubkey}


def test_nothing_refused_or_shadow_rejected_was_ever_notified(plugged: Plugged) -> None:
    notified = {event_id for body in plugged.webhook.bodies for event_id in body["ids"]}
    assert NEVER_STORED and notified and not notified & set(NEVER_STORED)
