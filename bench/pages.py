"""The reading pages against the worst a member can store: `uv run python bench/pages.py`.

Issue 19's attack: a claim with 200 links into 200 different evidence texts of 1.96 M characters
each; viewing its page took 15-22 s and 1.0 GB of the server's memory (plain text), 88-97 s and
8.3 GB (text built to be worst for quote normalization), and five views at once killed the
server at 12 GB. Targets: one view under 200 ms and under 20 MB of extra memory, five at once
likewise.

Builds both cases in an embedded PostgreSQL in a fresh temporary data directory (published
through the ledger service in this process, as any batch is, one evidence and its link at a
time), then starts `tms serve` on that data directory (a subprocess on 127.0.0.1,
`TMS_EMBED=off`), logs in as a browser does (NIP-98 over a server challenge), views every page
measured a few times (`warm_up`: a server that has run a while) and measures, for each case:

- one view of the claim page, then five at once: each view's latency as the client sees it, and
  the server process's peak resident memory during them above what it held before (the kernel's
  high-water mark, reset before each measurement through /proc/<pid>/clear_refs);
- the evidence page at the last page of one of those texts (its window read with one substr).

Each text is different (its own seed); each link quotes a passage near its text's end. Prints
figures; asserts nothing. `--links` and `--chars` scale the case down for a quick run; `--keep DIR`
builds in DIR and keeps it, so that a second run there measures at once (building both cases
takes about 8 minutes on 2 cores, 3 GB of disk).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
from serving import Server

from tms.config import Settings
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.pages.reading import EVIDENCE_PAGE_CHARS
from tms.rules.admission import OPERATOR
from tms.rules.terms import current_terms
from tms.store import database

MiB: Final = 1024 * 1024
TARGET_MS: Final = 200
TARGET_MB: Final = 20
AT_ONCE: Final = 5
QUOTE_CHARS: Final = 120
WORDS: Final = (
    "histamine intolerance diamine oxidase activity serum plasma mast cell review trial cohort "
    "patients reported symptoms reduced enzyme levels were measured in 2019 and again"
).split()
# Every character here normalizes to something else, most to more than one character: case
# folds that expand (ß, ẞ, İ, ŉ, ǰ, ΐ, ﬀ-ﬆ), marks and dashes that map, soft hyphens that go,
# whitespace that collapses; astral letters fold too (𐐀). No run of it maps one to one.
HOSTILE: Final = (
    "ßẞİŉǰΐﬀﬁﬂﬃﬄﬅﬆ“”«»—―\u2018\u2019\u2010\u2011\u2012\u2013\u2212\u00ad\u2028\u00a0\u3000𐐀𐐁ǅǈΣ"
)


def plain_text(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    text = " ".join(rng.choices(WORDS, k=chars // 5 + 10))
    return f"Document {seed}. {text}"[:chars]


def hostile_text(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    return f"Document {seed}. " + "".join(rng.choices(HOSTILE, k=chars))[: chars - 20]


@dataclass
class Case:
    name: str
    slug: str
    claim_id: str = ""
    warm_up_id: str = ""  # a claim with one link, viewed before measuring
    evidence_id: str = ""  # one of its texts, for the evidence page
    evidence_chars: int = 0


class Author:
    def __init__(self, key: SecretKey | None = None) -> None:
        self.key = key or SecretKey.generate()
        self.now = int(time.time())

    def sign(self, kind: int, content: dict[str, Any], tags: list[list[str]] | None = None) -> Any:
        text = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
        return self.key.sign(kind, text, self.now, tags or []).to_dict()


async def build(url: str, author: Author, cases: list[Case], ns: argparse.Namespace) -> None:
    pool = await database.open_pool(url, max_size=4)
    try:
        ledger = Ledger(pool)
        await ledger.approve([author.key.pubkey])
        terms = current_terms()
        agreed = author.sign(4706, {"version": terms["version"], "sha256": terms["sha256"]})
        await ledger.submit([agreed], origin=OPERATOR)
        for case in cases:
            started = time.perf_counter()
            make = plain_text if case.name == "plain" else hostile_text
            claim = author.sign(4702, {"collection": case.slug, "text": f"A {case.name} claim."})
            small = author.sign(4702, {"collection": case.slug, "text": "A warm-up claim."})
            await ledger.submit([claim, small], origin=OPERATOR)
            case.claim_id, case.warm_up_id = claim["id"], small["id"]
            for n in range(ns.links):
                text = make(ns.chars, seed=n + (0 if case.name == "plain" else 10_000))
                doc = author.sign(
                    4701, {"collection": case.slug, "title": f"Document {n}", "text": text}
                )
                start = len(text) - QUOTE_CHARS - 500
                link = author.sign(
                    4703,
                    {
                        "collection": case.slug,
                        "from": doc["id"],
                        "to": claim["id"],
                        "relation": "SUPPORTS",
                        "quote": text[start : start + QUOTE_CHARS],
                        "reason": f"Passage {n}.",
                    },
                )
                batch = [doc, link]
                if n == 0:  # the warm-up claim's one link
                    batch.append(
                        author.sign(
                            4703,
                            {
                                "collection": case.slug,
                                "from": doc["id"],
                                "to": small["id"],
                                "relation": "SUPPORTS",
                                "quote": text[100:200],
                                "reason": "Warm-up.",
                            },
                        )
                    )
                    case.evidence_id, case.evidence_chars = doc["id"], len(text)
                await ledger.submit(batch, origin=OPERATOR)
            print(
                f"  built {case.name}: {ns.links} texts of {ns.chars:,} characters "
                f"in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
        # As a database that has been running a while: its statistics gathered, and no
        # autovacuum of the fresh gigabytes running beside the measurements.
        started = time.perf_counter()
        await pool.execute("VACUUM ANALYZE")
        print(f"  VACUUM ANALYZE: {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        await pool.close()


# --- measuring ---------------------------------------------------------------------------------


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (clock ticks of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def peak_memory(pid: int) -> Any:
    """The server's peak resident memory during the block, above what it held at its start,
    and the CPU time it spent (a figure the machine's other work inflates less than latency:
    on a shared machine, the time a view waits for a core is not the server's)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current VmRSS
    result: dict[str, float] = {"before": _status(pid, "VmRSS"), "cpu": _cpu_seconds(pid)}
    yield result
    result["peak"] = _status(pid, "VmHWM")
    result["extra"] = max(0, result["peak"] - result["before"])
    result["cpu"] = _cpu_seconds(pid) - result["cpu"]


def login(url: str, key: SecretKey) -> httpx.Client:
    """A client holding a session cookie of `key`'s, as a browser that connected."""
    client = httpx.Client(base_url=url, timeout=600)
    challenge = client.get("/login/challenge").json()
    tags = [["u", challenge["url"]], ["method", "POST"]]
    event = key.sign(27235, "", int(time.time()), tags)
    header = "Nostr " + base64.b64encode(event.to_json().encode()).decode("ascii")
    answer = client.post(challenge["url"], headers={"Authorization": header, "Origin": url})
    if answer.status_code != 200:
        raise SystemExit(f"bench: login refused: {answer.text}")
    return client


def view(client: httpx.Client, path: str) -> tuple[float, int, int]:
    started = time.perf_counter()
    answer = client.get(path)
    return (time.perf_counter() - started) * 1000, answer.status_code, len(answer.content)


def verdict(ms: float, mb: float) -> str:
    ok = ms < TARGET_MS and mb < TARGET_MB
    return "within target" if ok else f"OVER TARGET ({TARGET_MS} ms, {TARGET_MB} MB)"


def warm_up(client: httpx.Client, cases: list[Case]) -> None:
    """Before anything is measured: what a server that has been running a while has done
    (statements prepared on every pooled connection, the start-up's background work over,
    the database's pages of each case read once), so that whichever case comes first is not
    charged for it."""
    with ThreadPoolExecutor(AT_ONCE) as pool:
        for case in cases:
            for path in (case.warm_up_id, case.claim_id):
                for _ in range(3):
                    page = f"/c/{case.slug}/claims/{path}"
                    list(pool.map(lambda c, page=page: view(c, page), [client] * AT_ONCE))


def measure(server: Server, client: httpx.Client, case: Case, rounds: int) -> None:
    assert server.proc is not None
    pid = server.proc.pid
    page = f"/c/{case.slug}/claims/{case.claim_id}"
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{case.name}: the claim page ({page[:40]}…), load average {load}")
    for _ in range(rounds):
        with peak_memory(pid) as memory:
            ms, status, size = view(client, page)
        mb = memory["extra"] / MiB
        print(
            f"  one view      {ms:7.1f} ms, +{mb:5.1f} MB peak, server CPU "
            f"{memory['cpu'] * 1000:4.0f} ms (status {status}, {size / 1024:.0f} KiB of HTML) "
            f"{verdict(ms, mb)}"
        )
    with ThreadPoolExecutor(AT_ONCE) as pool:
        for _ in range(rounds):
            clients = [client] * AT_ONCE
            with peak_memory(pid) as memory:
                started = time.perf_counter()
                answers = list(pool.map(lambda c: view(c, page), clients))
                wall = (time.perf_counter() - started) * 1000
            mb = memory["extra"] / MiB
            latencies = [a[0] for a in answers]
            statuses = sorted({a[1] for a in answers})
            print(
                f"  five at once  slowest {max(latencies):7.1f} ms, median "
                f"{statistics.median(latencies):7.1f} ms, all done in {wall:7.1f} ms, "
                f"+{mb:5.1f} MB peak, server CPU {memory['cpu'] * 1000:4.0f} ms "
                f"(statuses {statuses}) {verdict(max(latencies), mb)}"
            )
    last = max(1, -(-case.evidence_chars // EVIDENCE_PAGE_CHARS))
    evidence = f"/c/{case.slug}/evidence/{case.evidence_id}?page={last}"
    for _ in range(rounds):
        with peak_memory(pid) as memory:
            ms, status, size = view(client, evidence)
        print(
            f"  evidence page {last} of {last}: {ms:7.1f} ms, +{memory['extra'] / MiB:5.1f} MB "
            f"peak (status {status}, {size / 1024:.0f} KiB)"
        )


def run(ns: argparse.Namespace, tmp: Path) -> None:
    """Build the cases in `tmp` (or take them up from an earlier `--keep` run there), then
    serve and measure."""
    data_dir = tmp / "data"
    settings = Settings.from_env({"TMS_DATA_DIR": str(data_dir)})
    built = tmp / "cases.json"
    if built.exists():
        saved = json.loads(built.read_text())
        author = Author(SecretKey(bytes.fromhex(saved["secret"])))
        known = {case["name"]: Case(**case) for case in saved["cases"]}
        cases = [known[name] for name in ns.cases if name in known]
        print(f"taking up the cases built in {tmp}", flush=True)
    else:
        author = Author()
        cases = [Case(name, name) for name in ns.cases]

        async def setup() -> None:
            url = await database.database_url(
                settings.database_url, settings.data_dir
            )  # the embedded server, until exit
            await build(url, author, cases, ns)

        print(f"building in {tmp} (embedded PostgreSQL)", flush=True)
        asyncio.run(setup())
        saved = {"secret": author.key.secret.hex(), "cases": [vars(c) for c in cases]}
        built.write_text(json.dumps(saved))
    env = {"TMS_DATA_DIR": str(data_dir), "TMS_EMBED": "off", "TMS_SECRET": "bench-" * 8}
    server = Server(env, tmp / "server.log")
    try:
        seconds = server.start()
        print(f"tms serve answered /healthz after {seconds:.1f} s", flush=True)
        client = login(server.url, author.key)
        try:
            warm_up(client, cases)
            for case in cases:
                measure(server, client, case, ns.rounds)
        finally:
            client.close()
    except BaseException:
        print(server.log_tail())
        raise
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=200, help="texts (and links) per claim")
    parser.add_argument("--chars", type=int, default=1_960_000, help="characters per text")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each kind")
    parser.add_argument(
        "--cases", nargs="+", default=["plain", "hostile"], choices=["plain", "hostile"]
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="build in this directory and keep it; a later run with it measures again at once",
    )
    ns = parser.parse_args()
    if ns.keep is not None:
        ns.keep.mkdir(parents=True, exist_ok=True)
        run(ns, ns.keep)
        return
    with tempfile.TemporaryDirectory(prefix="tms-bench-pages-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
