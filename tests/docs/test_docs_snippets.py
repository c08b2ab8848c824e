"""Our own user guide, `/docs.md` and `/docs`, as a live server serves it: its base URL and
terms are this server's, its limits are the code's, and its Python and JavaScript snippets run
as they stand against it (Python with coincurve and httpx, JavaScript with the current
nostr-tools that `tests/docs/js-current` pins, importing `hexToBytes` from `nostr-tools/utils`),
failures included: a refused body and a refused call both raise with the server's words."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest
from factories import Live, environment, fresh_database, live_server, members, settings, terms
from pydantic_core import PydanticUndefined

from tms.config import Settings
from tms.ledger.service import Ledger
from tms.mcp.tools import TOOLS
from tms.nostr.events import SecretKey
from tms.rules.terms import current_terms
from tms.store.database import open_pool
from tms.web import docs

FENCE: Final = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
RUN_SECONDS: Final = 120


@pytest.fixture(scope="module")
def bots() -> tuple[SecretKey, SecretKey, SecretKey]:
    return SecretKey.generate(), SecretKey.generate(), SecretKey.generate()


@pytest.fixture(scope="module")
def rerunners() -> tuple[SecretKey, SecretKey]:
    """Members of `mcas` that run the guide twice (JavaScript, Python)."""
    return SecretKey.generate(), SecretKey.generate()


@pytest.fixture(scope="module")
def outsider() -> SecretKey:
    """A key the operator approved, in no collection."""
    return SecretKey.generate()


@pytest.fixture(scope="module")
def live(
    pg_server_url: str,
    template_url: str,
    bots: tuple[SecretKey, SecretKey, SecretKey],
    rerunners: tuple[SecretKey, SecretKey],
    outsider: SecretKey,
) -> Iterator[Live]:
    owner, python_bot, js_bot = bots
    named = [python_bot.pubkey, js_bot.pubkey, *(bot.pubkey for bot in rerunners)]

    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([owner.pubkey, outsider.pubkey])
            await ledger.publish([terms(owner), members(owner, "mcas", named)])
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_docs") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


def blocks(markdown: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(markdown) if lang == language]


def test_the_guide_is_this_servers(live: Live) -> None:
    guide = httpx.get(live.url + "/docs.md").text
    terms_now = current_terms()
    assert f"This server: `{live.url}`" in guide
    assert f"sha256 `{terms_now['sha256']}`" in guide
    assert "ef0c5a74" not in guide  # SPEC's placeholder hash
    assert "from 'nostr-tools/utils'" in guide and "@noble/hashes" not in guide
    for words in (
        "| Events per `publish` batch | 1,000 |",
        "2,000,000 characters",
        "at most 200 (`list_evidence` 500, `get_links` 1,000)",
        "| Browser login | 12 hours",
        "`unchallenged`: fewest REBUTS links plus contradictions",
        "`contested`: most REBUTS links plus contradictions first",
        "50 MB before extraction",
        "| JSON nesting | 64 levels",
        "| Tags per event | 1,000 tags and 100,000 characters in all",
        "must arrive within 10 seconds, the body within 60 seconds",
        "| Requests per client address | none,",  # the tests' servers run without rate limits
    ):
        assert words in guide, words
    page = httpx.get(live.url + "/docs", headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert "<h1>Using the TMS ledger</h1>" in page.text
    assert "<table>" in page.text and "<script>" not in page.text.split("<main")[1]


def test_the_guides_python_runs(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], tmp_path: Path
) -> None:
    guide = httpx.get(live.url + "/docs.md").text
    script = tmp_path / "guide.py"
    script.write_text("\n".join(blocks(guide, "python")), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environment(BOT_SECRET_HEX=bots[1].secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "collections: ['mcas']"  # the collection the guide then works in
    assert "'method': 'keyword'" in lines[1]
    assert "'accepted': [" in lines[2] and "'collections': ['mcas']" in lines[2]
    assert lines[3].endswith("events exported")
    assert (tmp_path / "mcas.jsonl").stat().st_size > 0
    # Use any Nostr client: AUTH, the stored links, three OKs, and the rebuttal, live
    assert any(line.startswith("auth: ['OK',") and "True" in line for line in lines)
    assert sum(line == "ok: True " for line in lines) == 3
    assert lines.count("rebutted: REBUTS") == 1  # before or after the OKs: the relay's timing


# Bodies the server refuses before any tool runs: one over the 1 MiB a call may send (413),
# one nested deeper than a body may be (400).
REFUSED_BODIES: Final = """
deep = []
for _ in range(100):
    deep = [deep]
for arguments in ({"request": "x" * 1_100_000}, {"request": deep}, {}):
    try:
        call("list_collections", arguments)
    except RuntimeError as exc:
        print("refused:", exc)
"""


def test_the_guides_python_raises_the_servers_words_for_every_failure(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], tmp_path: Path
) -> None:
    """`call` as the guide gives it, sent a body too large, one nested too deep and a call with
    no request: a JSON-RPC error (no `result`) must not become a KeyError."""
    guide = httpx.get(live.url + "/docs.md").text
    script = tmp_path / "failures.py"
    script.write_text(blocks(guide, "python")[0] + REFUSED_BODIES, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environment(BOT_SECRET_HEX=bots[1].secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    refused = [line for line in result.stdout.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 3, result.stdout
    assert refused[0].startswith("refused: HTTP 413: request body too large")
    assert refused[1].startswith("refused: HTTP 400: ") and "nested more than" in refused[1]
    assert "needs a signed `request`" in refused[2]


def test_the_guides_python_names_no_collection_a_new_key_is_not_in(
    live: Live, tmp_path: Path
) -> None:
    """A key in no collection stops with what to do, never with a refusal about `mcas`."""
    guide = httpx.get(live.url + "/docs.md").text
    script = tmp_path / "newcomer.py"
    script.write_text(blocks(guide, "python")[0], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environment(BOT_SECRET_HEX=SecretKey.generate().secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode != 0
    assert "mcas" not in result.stdout + result.stderr
    assert result.stdout.splitlines() == ["collections: []"]
    assert result.stderr.strip() == (
        "this key is in no collection yet: ask a collection's owner to add its npub"
    )


@pytest.mark.parametrize("name", ["guide.mjs", "guide.js"])
def test_the_guides_javascript_runs(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], js_current_packages: Path, name: str
) -> None:
    """With today's nostr-tools, as a .mjs file and as a .js file beside a package.json with
    "type": "module" (tests/docs/js-current's), the two ways /docs gives."""
    guide = httpx.get(live.url + "/docs.md").text
    assert "`bot.mjs`" in guide and '`"type": "module"`' in guide and "Node.js 20" in guide
    script = js_current_packages / name
    script.write_text("\n".join(blocks(guide, "js")), encoding="utf-8")
    result = subprocess.run(
        ["node", *_websocket_flag(), script.name],
        cwd=js_current_packages,
        env=environment(BOT_SECRET_HEX=bots[2].secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    assert "slug: 'mcas'" in result.stdout
    assert "accepted: [" in result.stdout
    assert "rebutted: Symptoms without low DAO activity." in result.stdout  # over the relay


# The clock the guide's scripts read, stopped: two runs sign the very same events, as two runs
# within one second do (each then meets the other's events as duplicates, never as new ones).
FROZEN_JS: Final = "const frozen = Date.now(); Date.now = () => frozen\n"
FROZEN_PY: Final = "import time\n_frozen = time.time()\ntime.time = lambda: _frozen\n"


def test_the_guides_javascript_hears_the_rebuttal_when_run_twice_in_one_second(
    live: Live, rerunners: tuple[SecretKey, SecretKey], js_current_packages: Path
) -> None:
    """The second run's claim, study and link are the first run's: stored already, so never
    delivered as new. Its subscription still hears the rebuttal, among the stored links."""
    bot = rerunners[0]
    guide = httpx.get(live.url + "/docs.md").text
    script = js_current_packages / "twice.mjs"
    script.write_text(FROZEN_JS + "\n".join(blocks(guide, "js")), encoding="utf-8")
    for _ in range(2):
        result = subprocess.run(
            ["node", *_websocket_flag(), script.name],
            cwd=js_current_packages,
            env=environment(BOT_SECRET_HEX=bot.secret.hex()),
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
        )
        assert result.returncode == 0, result.stderr
        assert "rebutted: Symptoms without low DAO activity." in result.stdout


def test_the_guides_python_hears_the_rebuttal_when_run_twice_in_one_second(
    live: Live, rerunners: tuple[SecretKey, SecretKey], tmp_path: Path
) -> None:
    bot = rerunners[1]
    guide = httpx.get(live.url + "/docs.md").text
    script = tmp_path / "twice.py"
    script.write_text(FROZEN_PY + "\n".join(blocks(guide, "python")), encoding="utf-8")
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=environment(BOT_SECRET_HEX=bot.secret.hex()),
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines.count("rebutted: REBUTS") == 1
        assert sum(line.startswith("ok: True") for line in lines) == 3


def test_the_guides_relay_snippets_raise_the_relays_words(
    live: Live, outsider: SecretKey, js_current_packages: Path, tmp_path: Path
) -> None:
    """A key the operator approved but that is no member of `mcas`: its subscription is
    CLOSED `restricted: ...` and its events are refused; both snippets stop with those words
    instead of waiting for ever."""
    guide = httpx.get(live.url + "/docs.md").text
    script = js_current_packages / "outsider.mjs"
    script.write_text("\n".join(blocks(guide, "js")), encoding="utf-8")
    result = subprocess.run(
        ["node", *_websocket_flag(), script.name],
        cwd=js_current_packages,
        env=environment(BOT_SECRET_HEX=outsider.secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode != 0
    assert "Error: restricted: " in result.stderr, result.stderr
    assert "rebutted" not in result.stdout
    python = blocks(guide, "python")
    helpers = python[0].split("\nmine = ")[0]  # the guide's helpers, not its collection lookup
    [relay] = [block for block in python if "websockets" in block]
    script = tmp_path / "outsider.py"
    script.write_text(helpers + '\nSLUG = "mcas"\n' + relay, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environment(BOT_SECRET_HEX=outsider.secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode != 0
    assert result.stdout.startswith("auth: ['OK',")  # AUTH is anyone's; reading is not
    assert result.stderr.strip().splitlines()[-1].startswith("RuntimeError: restricted: ")


def _websocket_flag() -> list[str]:
    """Node 22 has `WebSocket` built in, as the guide says; Node 20 behind a flag."""
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    return ["--experimental-websocket"] if major < 22 else []


def test_the_guides_javascript_throws_the_servers_words_for_a_refused_body(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], js_current_packages: Path
) -> None:
    guide = httpx.get(live.url + "/docs.md").text
    script = js_current_packages / "failures.mjs"
    refused = (
        "\ntry { await call('list_collections', { request: 'x'.repeat(1100000) }) }"
        "\ncatch (error) { console.log('refused: ' + error.message) }\n"
    )
    mcp_only = [block for block in blocks(guide, "js") if "nostr-tools/relay" not in block]
    script.write_text("\n".join(mcp_only) + refused, encoding="utf-8")
    result = subprocess.run(
        ["node", *_websocket_flag(), script.name],
        cwd=js_current_packages,
        env=environment(BOT_SECRET_HEX=bots[2].secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    assert "refused: HTTP 413: request body too large" in result.stdout


def test_the_guide_states_the_rate_limits_a_server_is_set_to() -> None:
    defaults = docs.markdown("https://tms.example.org", Settings.from_env({}))
    assert "| Requests per client address | 40 per second and 1,200 per minute," in defaults
    assert "| Calls per key | 20 per second and 600 per minute:" in defaults
    assert "| `fetch_url` per key | 10 per minute and 100 per hour" in defaults
    assert "| Logins per key | 5 per minute and 30 per hour |" in defaults
    tuned = Settings.from_env({"TMS_RATE_KEY": "2 per 5 seconds", "TMS_HEAD_SECONDS": "2.5"})
    guide = docs.markdown("https://tms.example.org", tuned)
    assert "| Calls per key | 2 per 5 seconds:" in guide and "within 2.5 seconds" in guide


def test_the_guide_states_the_connection_and_export_limits_a_server_is_set_to() -> None:
    defaults = docs.markdown("https://tms.example.org", Settings.from_env({}))
    assert "at 1,024 bytes a second at least after its first seconds |" in defaults
    assert "| Connections per client address | 64 at once;" in defaults
    assert "| Exports | one at a time per key (a second one at once: `429`" in defaults
    assert "2 at a time per server process" in defaults
    tuned = Settings.from_env(
        {"TMS_BODY_MIN_RATE": "0", "TMS_MAX_CONNECTIONS_PER_ADDRESS": "8", "TMS_MAX_EXPORTS": "3"}
    )
    guide = docs.markdown("https://tms.example.org", tuned)
    assert "bytes a second" not in guide
    assert "| Connections per client address | 8 at once;" in guide
    assert "3 at a time per server process" in guide


def test_the_guide_states_every_tools_arguments_and_defaults() -> None:
    """The guide's table of signed tools names each argument as the tool's model takes it:
    required, or optional (`?`) with its default in parentheses, as the server applies it."""
    guide = docs.markdown("https://tms.example.org", Settings.from_env({}))
    table = guide.split("### Signed requests", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", table, re.MULTILINE))
    for name, tool in TOOLS.items():
        if not tool.signed:
            continue
        row = rows[name]
        fields = tool.args.model_fields
        if not fields:
            assert row == "none", (name, row)
        for field_name, info in fields.items():
            arg = info.alias or field_name
            if info.is_required():
                assert f"`{arg}`" in row and f"`{arg}`?" not in row, (name, arg)
            elif info.default is None:
                assert f"`{arg}`?" in row, (name, arg)
            else:
                default = info.default
                assert default is not PydanticUndefined
                shown = (
                    str(default).lower()
                    if isinstance(default, bool)
                    else f"{default:,}"
                    if isinstance(default, int)
                    else f"`{default}`"
                )
                assert f"`{arg}`? ({shown}" in row, (name, arg, shown)
