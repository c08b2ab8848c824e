"""SPEC's Python and JavaScript snippets, run unchanged against a live server.

`tests/assets/spec_snippet.py` and `spec_snippet.mjs` hold SPEC's fenced blocks byte for byte,
followed by calls of their own. Only BASE's URL (and, in Python, the terms sha256) is replaced,
here, with the live server's. The server is the installed `tms serve` in a subprocess on a free
local port, over a fresh database of this module's own, where an owner has made `mcas` and listed
the two bots' keys as members (as SPEC's "Keys" has it) and the operator has approved them.

The JavaScript side needs Node.js 18 or later and npm. Without them these tests fail rather than
skip (`.ci/run` installs them). `tests/docs/js/package-lock.json` is installed with `npm ci` into a
temporary directory once per session.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from factories import (
    ASSETS,
    TMS,
    environment,
    free_port,
    fresh_database,
    members,
    profile,
    terms,
)
from fetch_site import Handler, Site

from tms.ledger.service import Ledger
from tms.nostr.events import Event, SecretKey
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

# What SPEC's snippets say, and what the tests put in its place.
SPEC_PYTHON_BASE: Final = 'BASE = "https://tms.delegance.ai"'
SPEC_JS_BASE: Final = "const BASE = 'https://tms.delegance.ai'"
SPEC_TERMS_SHA256: Final = "ef0c5a74783a3639172ab7dd1d7df764611bb70e29dccfb34823cc0a86154626"

SERVER_START_SECONDS: Final = 90
SERVER_STOP_SECONDS: Final = 30
SNIPPET_SECONDS: Final = 180  # the first vector search may load the embedding model

# SPEC "Publishing": the example batch's evidence text.
DOC_TEXT: Final = (
    "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity."
)
# The page fetch_url gets from the test's own web server (which TMS_FETCH_ALLOW lets it reach).
PAGE_TEXT: Final = (
    "Serum DAO activity was measured in 60 adults with suspected histamine intolerance.\n"
)
TOOLS: Final = [
    "check_proof",
    "fetch_url",
    "get_checkpoint",
    "get_consistency",
    "get_event",
    "get_links",
    "get_receipt",
    "list_claims",
    "list_collections",
    "list_evidence",
    "publish",
    "search_claims",
    "search_contradictions",
]


def substitute(text: str, replacements: dict[str, str]) -> str:
    """Each SPEC string replaced exactly once: if SPEC's text drifts, this says so."""
    for old, new in replacements.items():
        assert text.count(old) == 1, f"expected {old!r} exactly once in the snippet"
        text = text.replace(old, new)
    return text


# --- the live server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Live:
    base: str  # http://127.0.0.1:PORT
    terms_sha256: str  # the server's, from GET /terms
    owner: SecretKey
    python_bot: SecretKey
    js_bot: SecretKey
    log: Path  # the server's stdout and stderr
    page_url: str  # a text/plain page of PAGE_TEXT that the server may fetch

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _wait_until_healthy(process: subprocess.Popen[bytes], base: str) -> bool:
    """True once /healthz answers 200 with vector search ready (the model loads after the
    server is up, and SPEC's example shows a publish that embedded its claim); False if the
    server exits first."""
    deadline = time.monotonic() + SERVER_START_SECONDS
    while process.poll() is None:
        with contextlib.suppress(httpx.TransportError):
            health = httpx.get(f"{base}/healthz", timeout=2)
            if health.status_code == 200 and health.json().get("vectors") == "ready":
                return True
        assert time.monotonic() < deadline, (
            f"tms serve did not answer within {SERVER_START_SECONDS}s"
        )
        time.sleep(0.1)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=SERVER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def serving(database_url: str, workdir: Path, fetch_allow: str) -> Iterator[tuple[str, Path]]:
    """`tms serve` on a free port (a few tries, in case another process takes the port between
    our choosing it and the server binding it); yields (origin, log file); stops it at the end."""
    for attempt in range(3):
        log = workdir / f"server-{attempt}.log"
        port = free_port()
        with log.open("wb") as out:
            process = subprocess.Popen(
                # The seed's checkpoints were signed with a throwaway key: a new one, knowingly.
                [TMS, "serve", "--host", "127.0.0.1", "--port", str(port), "--new-log-key"],
                cwd=workdir,
                env=environment(
                    TMS_DATABASE_URL=database_url,
                    TMS_FETCH_ALLOW=fetch_allow,
                    # SPEC's `"embedded": 1` even when a slow machine loads the model first
                    TMS_EMBED_WAIT="120",
                    # the script goes on to call every tool back to back with one key, faster
                    # than the per-key burst limit lets a bot (tests/pages/test_rate_limits.py)
                    TMS_RATE_KEY="off",
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            base = f"http://127.0.0.1:{port}"
            if _wait_until_healthy(process, base):
                yield base, log
                return
        finally:
            _stop(process)
        text = log.read_text(errors="replace")
        if "address already in use" not in text.lower():
            pytest.fail(f"tms serve exited with {process.returncode}:\n{text}", pytrace=False)
    pytest.fail("tms serve found no free port in 3 tries", pytrace=False)


async def _seed(database_url: str, owner: SecretKey, bots: list[SecretKey]) -> None:
    """The operator approves the three keys; the owner signs the terms and creates `mcas` with
    the bots as members."""
    pool = await open_pool(database_url, min_size=1, max_size=2)
    try:
        ledger = Ledger(pool)
        await ledger.approve([owner.pubkey, *(bot.pubkey for bot in bots)])
        await ledger.submit(
            [
                terms(owner),
                profile(owner, "owner", about="a person"),
                members(owner, "mcas", [bot.pubkey for bot in bots]),
            ],
            origin=OPERATOR,
        )
    finally:
        await pool.close()


def _page(handler: Handler) -> None:
    handler.reply(200, PAGE_TEXT.encode(), "text/plain; charset=utf-8")


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    workdir = Path(tempfile.mkdtemp(prefix="tms-spec-server-"))
    try:
        owner, python_bot, js_bot = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
        with fresh_database(pg_server_url, template_url, "tms_spec") as url:
            asyncio.run(_seed(url, owner, [python_bot, js_bot]))
            with (
                Site({"/page.txt": _page}) as site,
                serving(url, workdir, site.allow) as (base, log),
            ):
                served_terms = httpx.get(f"{base}/terms", timeout=10).json()
                page_url = site.url("/page.txt")
                yield Live(base, served_terms["sha256"], owner, python_bot, js_bot, log, page_url)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- running a snippet ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    spec: list[str]  # what SPEC's own print/console.log calls wrote, line by line
    steps: dict[str, Any]  # the {"step", "result"} lines of the calls after SPEC's


def run_snippet(live: Live, argv: list[str], cwd: Path, key: SecretKey) -> Output:
    env = environment(
        BOT_SECRET_HEX=key.secret.hex(), FETCH_URL=live.page_url, PYTHONIOENCODING="utf-8"
    )
    try:
        result = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            encoding="utf-8",
            timeout=SNIPPET_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{argv[-1]} ran over {SNIPPET_SECONDS}s:\n{exc.stdout}\n{exc.stderr}")
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} exited with {result.returncode}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}\n"
            f"--- server log (last lines)\n{live.log_tail()}",
            pytrace=False,
        )
    spec: list[str] = []
    steps: dict[str, Any] = {}
    for line in result.stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, dict) and set(value) == {"step", "result"}:
            assert value["step"] not in steps, f"step {value['step']} printed twice"
            steps[value["step"]] = value["result"]
        else:
            spec.append(line)
    return Output(spec, steps)


def mcas(collections: dict[str, Any]) -> dict[str, Any]:
    [entry] = [c for c in collections["result"] if c["slug"] == "mcas"]
    assert set(entry) == {
        "slug",
        "owner",
        "created_at",
        "members",
        "evidence",
        "claims",
        "links",
        "contradictions",
    }
    return entry


def by_id(items: list[dict[str, Any]], event_id: str) -> dict[str, Any]:
    [item] = [item for item in items if item["id"] == event_id]
    return item


# --- the tests -----------------------------------------------------------------------------------


def test_the_installed_packages_sign_as_we_verify(js_packages: Path) -> None:
    """The harness alone (no server): SPEC's two imports resolve, and nostr-tools' events pass
    our own verification."""
    key = SecretKey.generate()
    script = js_packages / "sign_check.mjs"
    script.write_text(
        "import { finalizeEvent } from 'nostr-tools/pure'\n"
        "import { hexToBytes } from '@noble/hashes/utils'\n"
        "const sk = hexToBytes(process.env.BOT_SECRET_HEX)\n"
        "const content = JSON.stringify({ collection: 'mcas', text: 'Naïve “quotes” ✓.' })\n"
        "console.log(JSON.stringify(finalizeEvent({ kind: 4702, created_at: 1790000000,"
        " tags: [], content }, sk)))\n",
        encoding="utf-8",
    )
    result = subprocess.run(
        ["node", script.name],
        cwd=js_packages,
        env=environment(BOT_SECRET_HEX=key.secret.hex()),
        capture_output=True,
        encoding="utf-8",
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    event = Event.from_dict(json.loads(result.stdout))
    event.verify()
    assert event.pubkey == key.pubkey
    assert json.loads(event.content) == {"collection": "mcas", "text": "Naïve “quotes” ✓."}


def test_spec_python_snippet(live: Live, tmp_path: Path) -> None:
    bot = live.python_bot
    source = substitute(
        (ASSETS / "spec_snippet.py").read_text(encoding="utf-8"),
        {
            SPEC_PYTHON_BASE: f'BASE = "{live.base}"',
            SPEC_TERMS_SHA256: live.terms_sha256,
        },
    )
    script = tmp_path / "spec_snippet.py"
    script.write_text(source, encoding="utf-8")
    out = run_snippet(live, [sys.executable, str(script)], tmp_path, bot)
    s = out.steps
    ids = s["ids"]
    assert ids["pubkey"] == bot.pubkey

    # SPEC's three prints, in its order: the reads before the bot has written, then the batch.
    assert len(out.spec) == 3, out.spec
    collections, search, published = (ast.literal_eval(line) for line in out.spec)
    assert mcas(collections)["owner"] == live.owner.pubkey
    assert bot.pubkey in mcas(collections)["members"]
    assert set(search) == {"method", "note", "items"}
    assert search["method"] == "keyword"
    assert bot.pubkey not in {item["pubkey"] for item in search["items"]}  # not written yet
    # SPEC: {"accepted": [<3 ids>], "skipped": [], "embedded": 1, "collections": ["mcas"]}:
    # SPEC's fields exactly, beside the checkpoints the transparency log adds.
    spec_fields = {"accepted", "skipped", "embedded", "collections"}
    assert {k: v for k, v in published.items() if k in spec_fields} == {
        "accepted": [ids["doc"], ids["claim"], ids["link"]],
        "skipped": [],
        "embedded": 1,
        "collections": ["mcas"],
    }
    assert set(published) == spec_fields | {"checkpoints"}
    [signed] = published["checkpoints"]
    assert (signed["collection"], signed["origin"]) == ("mcas", "127.0.0.1/c/mcas")

    republished = s["republish"]
    assert republished["accepted"] == []
    assert sorted(republished["skipped"]) == sorted([ids["doc"], ids["claim"], ids["link"]])
    assert s["publish_contradiction"]["accepted"] == [ids["rival"], ids["contradiction"]]
    assert s["publish_contradiction"]["collections"] == ["mcas"]

    assert s["tools_list"] == TOOLS
    assert s["prompts_list"] == ["briefing", "claims_pass"]

    entry = mcas(s["list_collections"])
    assert entry["evidence"] >= 1 and entry["links"] >= 1 and entry["contradictions"] >= 1
    assert entry["claims"] >= 2

    event = s["get_event"]["result"]
    assert (event["id"], event["pubkey"], event["author"]) == (ids["doc"], bot.pubkey, "my-bot")
    assert (event["kind"], event["kind_name"], event["collection"]) == (4701, "evidence", "mcas")
    assert event["content"]["text"] == DOC_TEXT
    assert (event["chars"], event["offset"]) == (len(DOC_TEXT), 0)
    window = s["get_event_window"]["result"]
    assert window["content"]["text"] == DOC_TEXT[10:30]
    assert (window["chars"], window["offset"]) == (len(DOC_TEXT), 10)
    assert s["get_event_missing"] == {"result": None}

    keyword = s["search_claims_keyword"]
    assert keyword["method"] == "keyword"
    found = by_id(keyword["items"], ids["claim"])
    assert found["text"] == "Histamine intolerance results from reduced DAO activity."
    assert "rank" in found
    assert [link["id"] for link in found["links"]] == [ids["link"]]
    assert found["contradiction_ids"] == [ids["contradiction"]]
    vector = s["search_claims_vector"]
    assert vector["method"] == "vector"
    assert "distance" in by_id(vector["items"], ids["claim"])

    ranked = s["list_claims"]["result"]
    assert ranked[0]["id"] == ids["claim"]
    assert (ranked[0]["supports"], ranked[0]["findings"]) == (1, 1)

    [link] = s["get_links"]["result"]
    assert (link["id"], link["from"], link["to"]) == (ids["link"], ids["doc"], ids["claim"])
    assert link["relation"] == "SUPPORTS"
    assert link["quote"] == "thought to result from reduced diamine oxidase (DAO) activity"

    evidence = by_id(s["list_evidence"]["result"], ids["doc"])
    assert (evidence["title"], evidence["source"]) == ("HIT review", "Example journal")
    assert (evidence["chars"], evidence["link_count"]) == (len(DOC_TEXT), 1)
    assert "text" not in evidence

    contradiction = by_id(s["search_contradictions"]["result"], ids["contradiction"])
    assert sorted(contradiction["claim_ids"]) == sorted([ids["claim"], ids["rival"]])

    proof = s["check_proof"]
    assert (proof["ok"], proof["problems"], proof["root"]) == (True, [], "root")
    assert "Histamine intolerance results from reduced DAO activity." in proof["tree"]
    assert s["check_proof_broken"]["ok"] is False
    assert s["check_proof_broken"]["problems"]

    page = s["fetch_url"]
    assert (page["url"], page["text"], page["chars"]) == (live.page_url, PAGE_TEXT, len(PAGE_TEXT))
    assert s["publish_fetched"]["result"]["accepted"] == [s["publish_fetched"]["id"]]
    assert s["fetch_url_internal"]["error"]
    assert mcas(s["request_first_use"])["slug"] == "mcas"
    assert "already used" in s["request_reused"]["error"]
    assert "signed for tool 'list_claims', not 'get_links'" in s["request_wrong_tool"]["error"]


def test_spec_javascript_snippet(live: Live, js_packages: Path) -> None:
    bot = live.js_bot
    source = substitute(
        (ASSETS / "spec_snippet.mjs").read_text(encoding="utf-8"),
        {SPEC_JS_BASE: f"const BASE = '{live.base}'"},
    )
    # Beside node_modules: ESM resolves bare imports from the importing file's directory.
    script = js_packages / f"spec_snippet_{uuid.uuid4().hex[:8]}.mjs"
    script.write_text(source, encoding="utf-8")
    out = run_snippet(live, ["node", script.name], js_packages, bot)
    s = out.steps

    # SPEC's console.log(await tool('list_collections')): Node's inspection, not JSON.
    assert "mcas" in "\n".join(out.spec)
    claim = s["ids"]["claim"]
    assert s["ids"]["pubkey"] == bot.pubkey
    published = s["publish"]
    assert len(published["accepted"]) == 3
    assert published["accepted"][-1] == claim
    assert (published["skipped"], published["collections"]) == ([], ["mcas"])
    assert published["embedded"] == 1
    assert bot.pubkey in mcas(s["list_collections"])["members"]
    found = by_id(s["search_claims_keyword"]["items"], claim)
    assert found["pubkey"] == bot.pubkey
    assert found["author"] == "js-bot"
