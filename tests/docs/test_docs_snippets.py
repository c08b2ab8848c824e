"""Our own user guide, `/docs.md` and `/docs`, as a live server serves it: its base URL and
terms are this server's, its limits are the code's, and its Python and JavaScript snippets run
as they stand against it (Python with coincurve and httpx, JavaScript with the nostr-tools that
`tests/docs/js` pins, importing `hexToBytes` from `nostr-tools/utils`)."""

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

from tms.config import Settings
from tms.ledger.service import Ledger
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
def live(
    pg_server_url: str, template_url: str, bots: tuple[SecretKey, SecretKey, SecretKey]
) -> Iterator[Live]:
    owner, python_bot, js_bot = bots

    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([owner.pubkey])
            await ledger.publish(
                [terms(owner), members(owner, "mcas", [python_bot.pubkey, js_bot.pubkey])]
            )
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
    assert "'slug': 'mcas'" in lines[0]
    assert "'method': 'keyword'" in lines[1]
    assert "'accepted': [" in lines[2] and "'collections': ['mcas']" in lines[2]
    assert lines[3].endswith("events exported")
    assert (tmp_path / "mcas.jsonl").stat().st_size > 0


def test_the_guides_javascript_runs(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], js_packages: Path
) -> None:
    guide = httpx.get(live.url + "/docs.md").text
    script = js_packages / "guide.mjs"
    script.write_text("\n".join(blocks(guide, "js")), encoding="utf-8")
    result = subprocess.run(
        ["node", script.name],
        cwd=js_packages,
        env=environment(BOT_SECRET_HEX=bots[2].secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    assert "slug: 'mcas'" in result.stdout
    assert "accepted: [" in result.stdout


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
