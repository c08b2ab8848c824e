"""Our own user guide, `/docs.md` and `/docs`, as a live server serves it: its base URL and
terms are this server's, its limits are the code's, and its Python and JavaScript snippets run
as they stand against it (Python with coincurve and httpx, JavaScript with the current
nostr-tools that `tests/docs/js-current` pins, importing `hexToBytes` from `nostr-tools/utils`),
failures included: a refused body and a refused call both raise with the server's words."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest
from factories import (
    TMS,
    Live,
    claim,
    environment,
    fresh_database,
    live_server,
    members,
    settings,
    terms,
)
from pydantic_core import PydanticUndefined

from tms.config import Settings
from tms.ledger.service import Ledger
from tms.mcp.tools import TOOLS
from tms.nostr.events import SecretKey
from tms.nostr.nip19 import npub_encode
from tms.pages import docs
from tms.rules.admission import OPERATOR
from tms.rules.terms import current_terms
from tms.store.database import open_pool

FENCE: Final = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
RUN_SECONDS: Final = 120
BIG: Final = 1200  # claims in `big`: over the 1,000 ids a filter once took


@pytest.fixture(scope="module")
def bots() -> tuple[SecretKey, SecretKey, SecretKey]:
    return SecretKey.generate(), SecretKey.generate(), SecretKey.generate()


@pytest.fixture(scope="module")
def rerunners() -> tuple[SecretKey, SecretKey]:
    """Members of `mcas` that run the guide twice (JavaScript, Python)."""
    return SecretKey.generate(), SecretKey.generate()


@pytest.fixture(scope="module")
def outsider() -> SecretKey:
    """A key the operator approved, that signed the terms, in no collection: a publish of its
    would create a collection."""
    return SecretKey.generate()


@pytest.fixture(scope="module")
def relayers() -> tuple[SecretKey, SecretKey]:
    """Members of `mcas` that signed the terms and run the guide's relay snippets (Python,
    JavaScript)."""
    return SecretKey.generate(), SecretKey.generate()


@pytest.fixture(scope="module")
def live(
    pg_server_url: str,
    template_url: str,
    bots: tuple[SecretKey, SecretKey, SecretKey],
    rerunners: tuple[SecretKey, SecretKey],
    outsider: SecretKey,
    relayers: tuple[SecretKey, SecretKey],
) -> Iterator[Live]:
    owner, python_bot, js_bot = bots
    signers = [*rerunners, *relayers]  # they run the relay snippets alone: terms signed here
    named = [python_bot.pubkey, js_bot.pubkey, *(bot.pubkey for bot in signers)]

    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([owner.pubkey, outsider.pubkey])
            await ledger.submit(
                [
                    terms(owner),
                    members(owner, "mcas", named),
                    terms(outsider),
                    *(terms(bot) for bot in signers),
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    async def big(url: str) -> None:
        """`big`: more events than one page of ids once took (issue 33), read by the relayers."""
        start = int(time.time()) - 10_000
        claims = [claim(owner, "big", f"big {n}", created_at=start + n) for n in range(BIG)]
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.submit(
                [members(owner, "big", [bot.pubkey for bot in relayers])], origin=OPERATOR
            )
            for n in range(0, BIG, 1000):
                await ledger.submit(claims[n : n + 1000], origin=OPERATOR)
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_docs") as url:
        asyncio.run(seed(url))
        asyncio.run(big(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


def blocks(markdown: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(markdown) if lang == language]


def is_relay(block: str) -> bool:
    """Whether a snippet is one of "Use any Nostr client"'s, which run on their own."""
    return (
        ("websockets" in block or "nostr-tools/relay" in block)
        and not is_members(block)
        and not is_joining(block)
    )


def is_members(block: str) -> bool:
    """Whether a snippet is "Who the members are (NIP-43)"'s, which runs on its own."""
    return "13534" in block


def is_inviting(block: str) -> bool:
    """Whether a snippet is "Joining with an invite"'s owner script, which runs on its own."""
    return "createinvite" in block


def is_joining(block: str) -> bool:
    """Whether a snippet is "Joining with an invite"'s join and leave script."""
    return "28934" in block


def is_sync(block: str) -> bool:
    """Whether a snippet is one of "Keeping a copy in step (NIP-77)"'s, which run on their own."""
    return "nostr_sdk" in block or "@nostr-dev-kit/sync" in block


def is_management(block: str) -> bool:
    """Whether a snippet is "Managing members from a Nostr app (NIP-86)"'s, which runs alone."""
    return "nostr-tools/nip98" in block and not is_inviting(block)


def on_their_own(block: str) -> bool:
    return (
        is_relay(block)
        or is_sync(block)
        or is_members(block)
        or is_management(block)
        or is_inviting(block)
        or is_joining(block)
    )


def relay_snippet(markdown: str, language: str) -> str:
    [block] = [block for block in blocks(markdown, language) if is_relay(block)]
    return block


def sync_snippet(markdown: str, language: str) -> str:
    [block] = [block for block in blocks(markdown, language) if is_sync(block)]
    return block


def run_relay_snippet(
    language: str,
    block: str,
    where: Path,
    key: SecretKey,
    collection: str,
    fresh: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """A relay snippet exactly as printed, alone in a fresh directory (for JavaScript, one
    inside `where`, the installed nostr-tools, which ESM finds up the tree), with only the key
    and the collection it reads from the environment (and `env`); `fresh`: that directory, to
    run in it again."""
    fresh = fresh or Path(tempfile.mkdtemp(dir=where, prefix="relay-"))
    script = fresh / ("relay.py" if language == "python" else "relay.mjs")
    script.write_text(block, encoding="utf-8")
    command = [sys.executable] if language == "python" else ["node", *_websocket_flag()]
    return subprocess.run(
        [*command, script.name],
        cwd=fresh,
        env=environment(BOT_SECRET_HEX=key.secret.hex(), TMS_COLLECTION=collection, **env),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


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
    assert ">Using the TMS ledger</h1>" in page.text
    assert "<table>" in page.text and "<script>" not in page.text.split("<main")[1]


def test_the_guides_python_runs(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], tmp_path: Path
) -> None:
    guide = httpx.get(live.url + "/docs.md").text
    script = tmp_path / "guide.py"
    mcp = [block for block in blocks(guide, "python") if not on_their_own(block)]
    script.write_text("\n".join(mcp), encoding="utf-8")
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
    # the links as W3C Web Annotations: the guide's SUPPORTS link last, its quote placed
    assert lines[4].startswith("assessing 'thought to result from reduced diamine oxidase")
    assert re.fullmatch(r"\d+ annotations", lines[5])
    # the receipt the guide saved, checked offline by its command as printed
    saved = re.fullmatch(
        r"receipt for ([0-9a-f]{64}) saved as claim.tlog-proof: entry \d+ of \d+", lines[6]
    )
    assert saved is not None, lines[6]
    [command] = [block for block in blocks(guide, "bash") if "tms verify-receipt" in block]
    printed = command.strip().replace("<claim id>", saved[1])
    assert printed.startswith("uv run tms verify-receipt ")
    checked = subprocess.run(
        [TMS, *shlex.split(printed)[3:]],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"the receipt holds: event {saved[1]} is entry" in checked.stdout


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
    mcp = [block for block in blocks(guide, "js") if not on_their_own(block)]
    script.write_text("\n".join(mcp), encoding="utf-8")
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


@pytest.mark.parametrize("language", ["python", "js"])
def test_each_relay_snippet_runs_on_its_own_as_printed(
    live: Live,
    relayers: tuple[SecretKey, SecretKey],
    js_current_packages: Path,
    tmp_path: Path,
    language: str,
) -> None:
    """Issue 27: the JavaScript relay snippet leaned on an earlier snippet's `BASE`, `sk`, `sign`
    and `finalizeEvent`, and hard-coded `mcas`. Each now runs alone, in a fresh directory, with
    the collection from TMS_COLLECTION: AUTH, the stored answer, three OKs, the rebuttal live."""
    guide = httpx.get(live.url + "/docs.md").text
    block = relay_snippet(guide, language)
    assert "mcas" not in block
    # the collection comes from one variable near the top, read from the environment
    [top] = [n for n, line in enumerate(block.splitlines()) if "COLLECTION = " in line]
    assert top < 10 and "TMS_COLLECTION" in block.splitlines()[top]
    key = relayers[0] if language == "python" else relayers[1]
    where = tmp_path if language == "python" else js_current_packages
    result = run_relay_snippet(language, block, where, key, "mcas")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    if language == "python":
        assert lines[0].startswith("auth: ['OK',") and "True" in lines[0]
        assert lines[1] == "reading: ['EOSE', 'replies']"
        assert sum(line == "ok: True " for line in lines) == 3
        assert lines[-1] == "rebutted: REBUTS"
    else:
        assert lines == ["rebutted: Symptoms without low DAO activity."]
    assert result.stderr == ""


def test_the_members_snippet_prints_the_members_the_relay_key_signed(
    live: Live,
    bots: tuple[SecretKey, SecretKey, SecretKey],
    relayers: tuple[SecretKey, SecretKey],
    rerunners: tuple[SecretKey, SecretKey],
    outsider: SecretKey,
    js_current_packages: Path,
) -> None:
    """The NIP-43 script as printed: the relay key's member list (the owner first) and one
    `added:` per key the owner's list named, each by that list; refused for a key that may not
    read, in the relay's words."""
    guide = httpx.get(live.url + "/docs.md").text
    [block] = [block for block in blocks(guide, "js") if is_members(block)]
    assert "mcas" not in block
    result = run_relay_snippet("js", block, js_current_packages, relayers[1], "mcas")
    assert result.returncode == 0, result.stdout + result.stderr
    owner, python_bot, js_bot = bots
    named = sorted([python_bot.pubkey, js_bot.pubkey, *(k.pubkey for k in (*rerunners, *relayers))])
    [listed, *changes] = result.stdout.splitlines()
    assert listed == "members: " + " ".join([owner.pubkey, *named])
    [list_id] = {line.rsplit(" ", 1)[1] for line in changes}
    assert changes == [f"added: {key} by {list_id}" for key in named]
    refused = run_relay_snippet("js", block, js_current_packages, outsider, "mcas")
    assert refused.returncode == 1 and refused.stderr.startswith("refused: restricted: ")


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
    block = relay_snippet(guide, "js")
    for _ in range(2):
        result = run_relay_snippet("js", FROZEN_JS + block, js_current_packages, bot, "mcas")
        assert result.returncode == 0, result.stderr
        assert "rebutted: Symptoms without low DAO activity." in result.stdout


def test_the_guides_python_hears_the_rebuttal_when_run_twice_in_one_second(
    live: Live, rerunners: tuple[SecretKey, SecretKey], tmp_path: Path
) -> None:
    bot = rerunners[1]
    guide = httpx.get(live.url + "/docs.md").text
    block = relay_snippet(guide, "python")
    for _ in range(2):
        result = run_relay_snippet("python", FROZEN_PY + block, tmp_path, bot, "mcas")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines.count("rebutted: REBUTS") == 1
        assert sum(line.startswith("ok: True") for line in lines) == 3


@pytest.mark.parametrize("language", ["python", "js"])
@pytest.mark.parametrize("collection", ["mcas", "stray"])
def test_a_relay_snippet_refused_says_so_exits_1_and_writes_nothing(
    live: Live,
    outsider: SecretKey,
    js_current_packages: Path,
    tmp_path: Path,
    language: str,
    collection: str,
) -> None:
    """A key the operator approved, that signed the terms, but may not read the collection:
    `mcas`, of which it is no member, or `stray`, which does not exist (and which its first
    event would create). The subscription is CLOSED `restricted: ...` before anything is
    published: the snippet says so on one line, exits 1 without a stack trace, and neither a
    collection nor an event of the key's is stored (issue 27: Node crashed on the unhandled
    rejection after publishing a claim that created a collection)."""
    guide = httpx.get(live.url + "/docs.md").text
    where = tmp_path if language == "python" else js_current_packages
    block = relay_snippet(guide, language)
    result = run_relay_snippet(language, block, where, outsider, collection)
    assert result.returncode == 1, result.stdout + result.stderr
    [said] = result.stderr.strip().splitlines()  # one line: no traceback, no stack
    assert said.startswith("refused: restricted: ") and f"'{collection}'" in said, said
    assert "rebutted" not in result.stdout
    assert stored(live, "SELECT count(*) FROM events WHERE pubkey = $1", outsider.pubkey) == 1
    assert stored(live, "SELECT count(*) FROM collections WHERE slug = 'stray'") == 0


def _synced(result: subprocess.CompletedProcess[str]) -> tuple[int, int]:
    """`synced: N new, M held`: (N, M)."""
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = result.stdout.splitlines()
    new, held = re.fullmatch(r"synced: (\d+) new, (\d+) held", line).groups()  # type: ignore[union-attr]
    return int(new), int(held)


@pytest.mark.parametrize("language", ["python", "js"])
def test_each_sync_snippet_keeps_a_copy_in_step_and_is_refused_as_req_is(
    live: Live,
    bots: tuple[SecretKey, SecretKey, SecretKey],
    relayers: tuple[SecretKey, SecretKey],
    outsider: SecretKey,
    js_current_packages: Path,
    tmp_path: Path,
    language: str,
) -> None:
    """The guide's NIP-77 scripts as printed, rust-nostr's `Client.sync` (Python) and NDK's
    `@nostr-dev-kit/sync` under Node, headless: a member's copy from empty holds what a REQ
    returns, then 10 new events come as 10 new; a key that may not read, and a collection that
    does not exist, are refused with the same `restricted:` words (NEG-ERR), exit 1."""
    guide = httpx.get(live.url + "/docs.md").text
    block = sync_snippet(guide, language)
    assert "mcas" not in block
    [top] = [n for n, line in enumerate(block.splitlines()) if "COLLECTION = " in line]
    assert top < 10 and "TMS_COLLECTION" in block.splitlines()[top]
    key = relayers[0] if language == "python" else relayers[1]
    where = tmp_path if language == "python" else js_current_packages
    fresh = Path(tempfile.mkdtemp(dir=where, prefix="sync-"))
    new, held = _synced(run_relay_snippet(language, block, where, key, "mcas", fresh))
    readable = stored(
        live,
        "SELECT count(*) FROM events WHERE collection = 'mcas' OR (collection = '~unscoped' "
        "AND pubkey IN (SELECT owner FROM collections WHERE slug = 'mcas' UNION "
        "SELECT unnest(members) FROM member_lists WHERE collection = 'mcas'))",
    )
    assert new == held == readable
    owner = bots[0]
    ten = [claim(owner, "mcas", f"{language} sync {i} {time.time()}") for i in range(10)]
    published(live, ten)
    assert _synced(run_relay_snippet(language, block, where, key, "mcas", fresh)) == (10, held + 10)
    said = {}
    for slug in ("mcas", "stray"):
        refused = run_relay_snippet(language, block, where, outsider, slug)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        [line] = [x for x in refused.stderr.splitlines() if x.startswith("refused: ")]
        assert "restricted: " in line and f"'{slug}'" in line, refused.stderr
        said[slug] = line.replace(f"'{slug}'", "<slug>").replace(f"/c/{slug}", "<relay>")
    assert said["mcas"] == said["stray"]


# Loaded before the script (NODE_OPTIONS=--import): every WebSocket it opens, by URL, to a file.
RECORD_SOCKETS: Final = """import { appendFileSync } from 'node:fs'
const Real = globalThis.WebSocket
globalThis.WebSocket = class extends Real {
  constructor (url, ...rest) {
    appendFileSync(process.env.SOCKETS_OPENED, `${url}\\n`)
    super(url, ...rest)
  }
}
"""


def recording(fresh: Path) -> tuple[dict[str, str], Path]:
    """The environment that records every socket a Node script opens, and where it does."""
    hook = fresh / "record-sockets.mjs"
    hook.write_text(RECORD_SOCKETS, encoding="utf-8")
    opened = fresh / "sockets-opened.txt"
    return {"NODE_OPTIONS": f"--import={hook.as_uri()}", "SOCKETS_OPENED": str(opened)}, opened


def test_the_ndk_sync_copies_a_collection_over_1000_events_and_opens_no_other_relay(
    live: Live, relayers: tuple[SecretKey, SecretKey], js_current_packages: Path
) -> None:
    """Issue 33: NDK fetches what NIP-77 said it lacks with one REQ of every id; past 1,000 the
    relay refused it (`CLOSED invalid: ...`), NDK swallowed that, and the script said `synced:
    0 new, 0 held` and exit 0. It now copies all of `big`. And NDK's defaults opened
    wss://purplepag.es and wss://nos.lol besides: a global WebSocket that records every URL
    opened shows the script opens this relay alone."""
    guide = httpx.get(live.url + "/docs.md").text
    block = sync_snippet(guide, "js")
    fresh = Path(tempfile.mkdtemp(dir=js_current_packages, prefix="sync-big-"))
    env, opened = recording(fresh)
    result = run_relay_snippet("js", block, js_current_packages, relayers[1], "big", fresh, **env)
    new, held = _synced(result)
    readable = stored(
        live,
        "SELECT count(*) FROM events WHERE collection = 'big' OR (collection = '~unscoped' "
        "AND pubkey IN (SELECT owner FROM collections WHERE slug = 'big' UNION "
        "SELECT unnest(members) FROM member_lists WHERE collection = 'big'))",
    )
    assert new == held == readable > BIG
    urls = opened.read_text(encoding="utf-8").splitlines()
    relay = "ws" + live.url.removeprefix("http") + "/c/big"
    assert urls and {url.rstrip("/") for url in urls} == {relay}, urls


def test_the_ndk_sync_stops_at_a_closed_with_the_relays_words(
    live: Live, relayers: tuple[SecretKey, SecretKey], js_current_packages: Path
) -> None:
    """A server whose read budget is 10 units a minute: the NEG-OPEN over `big` costs 2, the
    REQ of its 1,200 ids 13 (capped at the minute's 10), and is `CLOSED` `rate-limited:`. The
    script says so on one line and exits 1, instead of `synced: 0 new` and 0."""
    config = settings(TMS_EMBED="off", TMS_RATE_READ="10/minute")
    with live_server(live.database_url, config) as tight:  # another process, the same ledger
        block = sync_snippet(httpx.get(tight.url + "/docs.md").text, "js")
        result = run_relay_snippet("js", block, js_current_packages, relayers[1], "big")
    assert result.returncode == 1, result.stdout + result.stderr
    [said] = result.stderr.strip().splitlines()
    assert said.startswith("refused: rate-limited: ") and "this key's reads" in said, said
    assert result.stdout == ""


def published(live: Live, events: list[dict[str, object]]) -> None:
    async def publish() -> None:
        pool = await open_pool(live.database_url, min_size=1, max_size=1)
        try:
            await Ledger(pool).submit(events, origin=OPERATOR)
        finally:
            await pool.close()

    asyncio.run(publish())


def stored(live: Live, sql: str, *args: object) -> object:
    """One value read from the server's database (what the snippet left behind)."""

    async def read() -> object:
        pool = await open_pool(live.database_url, min_size=1, max_size=1)
        try:
            return await pool.fetchval(sql, *args)
        finally:
            await pool.close()

    return asyncio.run(read())


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
    mcp_only = [block for block in blocks(guide, "js") if not on_their_own(block)]
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


def test_the_management_snippet_runs_as_printed(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], js_current_packages: Path
) -> None:
    """NIP-86 as /docs prints it: the owner of `mcas` lets a key in and out with nostr-tools'
    NIP-98, and the change is on the collection's member list in between."""
    guide = httpx.get(live.url + "/docs.md").text
    [block] = [block for block in blocks(guide, "js") if is_management(block)]
    newcomer = SecretKey.generate()
    fresh = Path(tempfile.mkdtemp(dir=js_current_packages, prefix="members-"))
    (fresh / "members.mjs").write_text(block, encoding="utf-8")
    result = subprocess.run(
        ["node", "members.mjs"],
        cwd=fresh,
        env=environment(
            BOT_SECRET_HEX=bots[0].secret.hex(),
            TMS_COLLECTION="mcas",
            MEMBER_NPUB=npub_encode(newcomer.pubkey),
        ),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "methods: supportedmethods allowpubkey unallowpubkey listallowedpubkeys createinvite",
        "allowed: true",
        "listed: true",
        "unallowed: true",
    ]


def run_alone(block: str, packages: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """One of the guide's scripts that run on their own, saved and run as printed."""
    fresh = Path(tempfile.mkdtemp(dir=packages, prefix="invite-"))
    (fresh / "script.mjs").write_text(block, encoding="utf-8")
    return subprocess.run(
        ["node", "--experimental-websocket", "script.mjs"],
        cwd=fresh,
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


def test_the_invite_and_join_snippets_run_as_printed(
    live: Live, bots: tuple[SecretKey, SecretKey, SecretKey], js_current_packages: Path
) -> None:
    """NIP-43 as /docs prints it: the owner of `mcas` makes an invite and prints its code; a
    new key joins with it (again: `duplicate:`), another key's claim of the used code is
    refused, and the new key leaves."""
    guide = httpx.get(live.url + "/docs.md").text
    [invite] = [block for block in blocks(guide, "js") if is_inviting(block)]
    [join] = [block for block in blocks(guide, "js") if is_joining(block)]
    owner = bots[0].secret.hex()
    made = run_alone(invite, js_current_packages, BOT_SECRET_HEX=owner, TMS_COLLECTION="mcas")
    assert made.returncode == 0, made.stdout + made.stderr
    [code] = [line.split(" ", 1)[1] for line in made.stdout.splitlines()]
    newcomer, latecomer = SecretKey.generate(), SecretKey.generate()

    def joined(key: SecretKey, code: str | None) -> subprocess.CompletedProcess[str]:
        env = {"BOT_SECRET_HEX": key.secret.hex(), "TMS_COLLECTION": "mcas"}
        return run_alone(
            join, js_current_packages, **env, **({"INVITE_CODE": code} if code else {})
        )

    first = joined(newcomer, code)
    assert (first.returncode, first.stdout) == (0, "joined: ok\n"), first.stderr
    again = joined(newcomer, code)
    assert again.stdout.startswith("joined: duplicate: "), again.stderr
    used = joined(latecomer, code)
    assert used.returncode == 1 and used.stderr.startswith("refused: restricted: ")
    left = joined(newcomer, None)
    assert (left.returncode, left.stdout) == (0, "left: ok\n"), left.stderr
