"""How the costs grow with a collection: `uv run python bench/scale.py`.

For each size (10,000, 100,000 and 1,000,000 claims in one collection, then 1,000 collections
of 1,000), a fresh `tms serve` over a fresh embedded PostgreSQL:

1. the server is started once to make its database, a key approved and the terms signed through
   `/mcp`; it is stopped, and the claims are written straight into the database with COPY
   (events with random ids and signatures: what is measured here is never a signature check;
   their claims, kept counts and claim keys, as a publish would have written them, and, with
   vectors on, each claim's vector, taken from a pool of `--pool` real embeddings of claim
   texts with a little noise). Claim texts are `bench/search.py`'s (sentences from a fixed
   vocabulary, seeded), so keyword queries match some but not all;
2. the server is started again: it builds each collection's transparency log from its events
   (`TransparencyLog.backfill`), which the bench waits for (the time is printed);
3. through the real server, as clients call it: one-claim publishes over `/mcp` (p50/p99), a
   relay `REQ` for the newest 100 claims after NIP-42 AUTH (time to EOSE), `search_claims`
   by keyword and by vector, the `list_claims` sorts (signed kind-4707 requests), one
   collection's export over HTTP with NIP-98 (events/s and the server's peak memory), and the
   server's resident memory after it all.

Targets (issue 30): publish and `REQ` p50 within 1.5x of the 10,000 figure at 1,000,000;
`search_claims` p50 <= 50 ms at 100,000 claims with vectors on. Prints figures; asserts nothing.

    uv run python bench/scale.py --sizes 10000,100000 --vectors 10000,100000
    uv run python bench/scale.py --sizes 1000000 --vectors none
    uv run python bench/scale.py --sizes 1000x1000            # 1,000 collections of 1,000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
import numpy as np
from pgvector.asyncpg import register_vector
from serving import Server, Signer, call, compact
from websockets.asyncio.client import connect

from tms.nostr.events import SecretKey
from tms.rules.quotes import claim_key
from tms.store.database import embedded_url, start_embedded

SLUG: Final = "bench"
T0: Final = int(time.time()) - 30 * 86_400  # the copied claims' times: the last 30 days
COPY_CHUNK: Final = 50_000
CALLS: Final = 200  # one-claim publishes timed at each size
READS: Final = 50  # REQs and searches timed at each size
SORTS: Final = ("recent", "links", "unsupported", "unchallenged", "contested")
PARTS: Final = ("publish", "req", "keyword", "list", "export", "vector")


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def figures(values: Sequence[float]) -> str:
    return f"p50 {pct(values, 0.5):7.2f} ms, p99 {pct(values, 0.99):7.2f} ms"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# --- claims written straight into the database -------------------------------------------------


class Texts:
    """Claim texts (bench/search.py's generator, seeded) and, with vectors on, a pool of real
    embeddings of some of them, each claim given one of the pool's vectors with noise."""

    def __init__(self, pool: int, vectors: bool) -> None:
        from search import claim_text

        self.rng = random.Random(30)
        self.claim_text = claim_text
        self.model: str | None = None
        self.pool: np.ndarray | None = None
        if vectors:
            from tms.config import Settings
            from tms.search.model import Embedder

            embedder = Embedder.load(Settings.from_env({"TMS_DATA_DIR": "/nonexistent"}).embedding)
            texts = [claim_text(self.rng) for _ in range(pool)]
            started = time.perf_counter()
            self.pool = np.array(embedder.embed(texts), dtype=np.float32)
            self.model = embedder.model_id
            print(
                f"   {pool:,} pool vectors embedded in {time.perf_counter() - started:.1f} s "
                f"({embedder.model_id}, {self.pool.shape[1]} dims)",
                flush=True,
            )

    def text(self) -> str:
        return str(self.claim_text(self.rng))

    def vectors(self, count: int, rng: np.random.Generator) -> np.ndarray:
        assert self.pool is not None
        picked = self.pool[rng.integers(0, len(self.pool), count)]
        noisy = picked + rng.normal(0, 0.02, picked.shape).astype(np.float32)
        normed: np.ndarray = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        return normed


async def fill(
    database_url: str, owner: str, collections: list[str], per: int, texts: Texts
) -> float:
    """`per` claims in each collection by COPY, as a publish would have stored them (less the
    log, which the server builds at start); returns the seconds it took."""
    started = time.perf_counter()
    rng = np.random.default_rng(30)
    conn = await asyncpg.connect(database_url)
    await register_vector(conn)
    try:
        for slug in collections:
            await conn.execute(
                "INSERT INTO collections (slug, owner, created_by) VALUES ($1, $2, $2)",
                slug,
                owner,
            )
            await conn.execute(
                "INSERT INTO collection_counts (collection, claims) VALUES ($1, $2)", slug, per
            )
        total = len(collections) * per
        done = 0
        while done < total:
            count = min(COPY_CHUNK, total - done)
            await _copy_chunk(conn, owner, collections, per, done, count, texts, rng)
            done += count
            if total >= 200_000:
                took = time.perf_counter() - started
                print(f"   {done:,} of {total:,} claims copied ({took:.0f} s)", flush=True)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def _copy_chunk(
    conn: asyncpg.Connection,
    owner: str,
    collections: list[str],
    per: int,
    start: int,
    count: int,
    texts: Texts,
    rng: np.random.Generator,
) -> None:
    ids = [row.tobytes().hex() for row in rng.integers(0, 256, (count, 32), dtype=np.uint8)]
    sigs = [row.tobytes().hex() for row in rng.integers(0, 256, (count, 64), dtype=np.uint8)]
    slugs = [collections[(start + n) // per] for n in range(count)]
    claim_texts = [texts.text() for _ in range(count)]
    async with conn.transaction():
        seq0 = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM events")
        await conn.copy_records_to_table(
            "events",
            records=(
                (
                    ids[n],
                    owner,
                    T0 + (start + n) * 30 * 86_400 // (len(collections) * per),
                    4702,
                    "[]",
                    compact({"collection": slugs[n], "text": claim_texts[n]}),
                    sigs[n],
                    slugs[n],
                )
                for n in range(count)
            ),
            columns=["id", "pubkey", "created_at", "kind", "tags", "content", "sig", "collection"],
        )
        rows = await conn.fetch(
            "SELECT seq, id FROM events WHERE seq > $1 ORDER BY seq", seq0, timeout=600
        )
        seqs = {row["id"]: row["seq"] for row in rows}
        await conn.copy_records_to_table(
            "claims",
            records=((ids[n], seqs[ids[n]], slugs[n], owner, claim_texts[n]) for n in range(count)),
            columns=["id", "seq", "collection", "pubkey", "text"],
        )
        await conn.copy_records_to_table(
            "claim_counts",
            records=((ids[n], slugs[n], seqs[ids[n]]) for n in range(count)),
            columns=["claim_id", "collection", "seq"],
        )
        await conn.copy_records_to_table(
            "claim_keys",
            records=((ids[n], slugs[n], claim_key(claim_texts[n])) for n in range(count)),
            columns=["claim_id", "collection", "key"],
        )
        if texts.model is not None:
            vectors = texts.vectors(count, rng)
            await conn.copy_records_to_table(
                "embeddings",
                records=((ids[n], texts.model, slugs[n], 4702, vectors[n]) for n in range(count)),
                columns=["event_id", "model", "collection", "kind", "embedding"],
            )


# --- what is timed -----------------------------------------------------------------------------


async def publishes(server: Server, signer: Signer, slug: str) -> list[float]:
    """One-claim publishes over /mcp, one after another (signed beforehand)."""
    from search import claim_text

    rng = random.Random(7)
    bodies = []
    for n in range(CALLS + 20):
        event = signer.sign(4702, {"collection": slug, "text": f"{claim_text(rng)} ({n})"})
        bodies.append(_rpc("publish", {"events": [event]}))
    times = []
    async with httpx.AsyncClient(timeout=60) as http:
        for body in bodies:
            started = time.perf_counter()
            response = await http.post(f"{server.url}/mcp", content=body, headers=_HEADERS)
            result = response.json()["result"]
            assert not result.get("isError"), result
            times.append((time.perf_counter() - started) * 1000)
    return times[20:]


async def newest(server: Server, signer: Signer, path: str) -> list[float]:
    """A REQ for the newest 100 claims, to EOSE, after AUTH, `READS` times on one socket."""
    url = server.url.replace("http", "ws") + path
    times = []
    async with connect(url, max_size=None) as ws:
        challenge = json.loads(await ws.recv())[1]
        auth = signer.key.sign(
            22242, "", int(time.time()), [["relay", url], ["challenge", challenge]]
        )
        await ws.send(json.dumps(["AUTH", auth.to_dict()]))
        assert json.loads(await ws.recv())[2] is True
        for n in range(READS + 5):
            started = time.perf_counter()
            await ws.send(json.dumps(["REQ", f"r{n}", {"kinds": [4702], "limit": 100}]))
            got = 0
            while True:
                message = json.loads(await ws.recv())
                if message[0] == "EVENT":
                    got += 1
                elif message[0] in ("EOSE", "CLOSED"):
                    break
            assert got == 100, (got, message)
            times.append((time.perf_counter() - started) * 1000)
            await ws.send(json.dumps(["CLOSE", f"r{n}"]))
    return times[5:]


def signed_calls(
    server: Server, signer: Signer, tool: str, args: Sequence[dict[str, Any]]
) -> list[float]:
    """Signed tool calls (a fresh kind-4707 request each, signed beforehand), one after
    another; the first few warm up."""
    bodies = [_rpc(tool, {"request": signer.request(tool, a)}) for a in args]
    times = []
    with httpx.Client(timeout=120) as http:
        for body in bodies:
            started = time.perf_counter()
            response = http.post(f"{server.url}/mcp", content=body, headers=_HEADERS)
            result = response.json()["result"]
            assert not result.get("isError"), result
            times.append((time.perf_counter() - started) * 1000)
    return times[5:]


def export(server: Server, signer: Signer, slug: str) -> tuple[int, float, int, int]:
    """One collection's export over HTTP: (lines, events/s, server RSS before, peak)."""
    url = f"{server.url}/c/{slug}/export.jsonl"
    event = signer.key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    headers = {"Authorization": "Nostr " + base64.b64encode(event.to_json().encode()).decode()}
    rest = server.memory()[0]
    peak = rest
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, server.memory()[0])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines = 0
    started = time.perf_counter()
    with httpx.stream("GET", url, headers=headers, timeout=3600) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            lines += chunk.count(b"\n")
    elapsed = time.perf_counter() - started
    stop.set()
    sampler.join()
    return lines, lines / elapsed, rest, peak


_HEADERS: Final = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def _rpc(tool: str, arguments: dict[str, Any]) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return compact(body).encode()


# --- one size --------------------------------------------------------------------------------


def measure(
    size: str, collections: list[str], per: int, vectors: bool, ns: argparse.Namespace, tmp: Path
) -> dict[str, str]:
    """One size: filled, then measured with embedding on (vector search, when `vectors`), then
    with it off (everything else: a publish with embedding on waits for its claim's vector)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(tmp / "data"), TMS_EMBED="on" if vectors else "off")
    off = {**env, "TMS_EMBED": "off"}
    total = len(collections) * per
    print(
        f"\n== {size}: {total:,} claims in {len(collections):,} collection(s), vectors "
        f"{'on' if vectors else 'off'} (load {load()})",
        flush=True,
    )
    signer = Signer()
    filled = tmp / "filled.json"  # with --keep: the owner's key, once the claims are in
    if filled.exists():
        signer.key = SecretKey(bytes.fromhex(json.loads(filled.read_text())["secret"]))
        database_url = asyncio.run(_database_url(tmp / "data"))
        print("   kept from an earlier run (--keep): nothing copied", flush=True)
    else:
        server = Server(env, tmp / "server.log")
        server.start(timeout=900)  # its database made (and, with vectors, the HNSW index)
        try:
            server.approve(signer.key.pubkey)
            with httpx.Client(timeout=60) as http:
                agreement = signer.sign(4706, server.agreement())
                call(http, server.url, "publish", {"events": [agreement]})
        finally:
            server.stop()
        texts = Texts(ns.pool, vectors)
        database_url = asyncio.run(_database_url(tmp / "data"))
        took = asyncio.run(fill(database_url, signer.key.pubkey, collections, per, texts))
        print(f"   copied in {took:.0f} s", flush=True)
        filled.write_text(json.dumps({"secret": signer.key.secret.hex()}))
    row: dict[str, str] = {"size": size}
    slug = collections[0]
    from search import keyword_queries, vector_queries

    rng = random.Random(31)
    server = Server(off, tmp / "server.log")
    started = time.perf_counter()
    server.start(timeout=1800)
    ready = time.perf_counter() - started
    built = asyncio.run(_logs_built(database_url, len(collections)))
    print(f"   ready in {ready:.1f} s; every log built {built:.0f} s later", flush=True)
    try:
        rest = server.memory()[0]
        parts = set(ns.parts.split(","))
        if "publish" in parts:
            times = asyncio.run(publishes(server, signer, slug))
            row["publish"] = figures(times)
            print(f"   one-claim publish over /mcp: {row['publish']}", flush=True)
        if "req" in parts:
            times = asyncio.run(newest(server, signer, f"/c/{slug}"))
            row["req"] = figures(times)
            print(f"   REQ newest 100 on /c/{slug}: {row['req']}", flush=True)
        if "req" in parts and len(collections) > 1:
            times = asyncio.run(newest(server, signer, "/"))
            row["req /"] = figures(times)
            print(f"   REQ newest 100 on / (every collection): {row['req /']} (load {load()})")
        queries = keyword_queries(rng, READS + 5)
        if "keyword" in parts:
            times = signed_calls(
                server,
                signer,
                "search_claims",
                [{"collection": slug, "text": q, "method": "keyword"} for q in queries],
            )
            row["keyword"] = figures(times)
            print(f"   search_claims keyword: {row['keyword']} (load {load()})", flush=True)
        for sort in SORTS if "list" in parts else ():
            times = signed_calls(
                server, signer, "list_claims", [{"collection": slug, "sort": sort}] * 25
            )
            row[f"list {sort}"] = f"p50 {pct(times, 0.5):.2f} ms"
        if "list" in parts:
            listed = ", ".join(f"{s} {row[f'list {s}']}" for s in SORTS)
            print(f"   list_claims: {listed}", flush=True)
        if "export" in parts:
            lines, rate, before, peak = export(server, signer, slug)
            row["export"] = (
                f"{rate:,.0f} events/s ({lines:,} lines), RSS {before / 2**20:.0f} -> "
                f"{peak / 2**20:.0f} MiB"
            )
            print(f"   export of /c/{slug}: {row['export']}", flush=True)
        after = server.memory()[0]
        row["memory"] = f"{rest / 2**20:.0f} MiB at rest, {after / 2**20:.0f} MiB after"
        print(f"   server memory: {row['memory']} (load {load()})", flush=True)
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()
    if vectors and "vector" in ns.parts.split(","):
        # The claims published above have no vector: delete nothing, let the catch-up embed
        # them first, so that the searches run beside no embedding.
        server = Server(env, tmp / "server.log")
        server.start(timeout=1800)
        try:
            asyncio.run(_queue_empty(database_url))
            queries = vector_queries(rng, READS + 5)
            times = signed_calls(
                server,
                signer,
                "search_claims",
                [{"collection": slug, "text": q, "method": "vector"} for q in queries],
            )
            row["vector"] = figures(times)
            print(f"   search_claims vector: {row['vector']} (load {load()})", flush=True)
        except Exception:
            print(server.log_tail(), file=sys.stderr)
            raise
        finally:
            server.stop()
    return row


async def _queue_empty(database_url: str, timeout: float = 600) -> None:
    """Until the embedding catch-up has emptied its queue."""
    started = time.perf_counter()
    conn = await asyncpg.connect(database_url)
    try:
        while await conn.fetchval("SELECT count(*) FROM embedding_queue"):
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"the embedding queue was not empty after {timeout:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


async def _logs_built(database_url: str, collections: int, timeout: float = 3600) -> float:
    """Until every collection has a checkpoint (the start-up back-fill built its log)."""
    started = time.perf_counter()
    conn = await asyncpg.connect(database_url)
    try:
        while True:
            have = await conn.fetchval("SELECT count(DISTINCT collection) FROM tlog_checkpoints")
            if have >= collections:
                return time.perf_counter() - started
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{have} of {collections} logs built in {timeout:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


async def _database_url(data_dir: Path) -> str:
    return await embedded_url(await start_embedded(data_dir))


def sizes(text: str) -> Iterator[tuple[str, list[str], int]]:
    for part in text.split(","):
        if "x" in part:
            count, per = (int(x) for x in part.split("x"))
            yield part, [f"{SLUG}-{n}" for n in range(count)], per
        else:
            yield part, [SLUG], int(part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="10000,100000,1000000,1000x1000",
        help="claims in one collection, or COLLECTIONSxCLAIMS (10000,100000,1000000,1000x1000)",
    )
    parser.add_argument(
        "--vectors",
        default="10000,100000",
        help="the sizes that run with vectors on (10000,100000; 'none' for none)",
    )
    parser.add_argument("--pool", type=int, default=2000, help="real embeddings to draw from")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"what is timed at each size ({','.join(PARTS)})",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each size's database in DIR/<size> and, when it is there, time it again "
        "without copying (the claims published by earlier runs stay)",
    )
    ns = parser.parse_args()
    with_vectors = set(ns.vectors.split(","))
    rows = []
    for size, collections, per in sizes(ns.sizes):
        if ns.keep is not None:
            kept = ns.keep / size
            kept.mkdir(parents=True, exist_ok=True)
            rows.append(measure(size, collections, per, size in with_vectors, ns, kept))
            continue
        with tempfile.TemporaryDirectory(prefix="tms-bench-scale-") as tmp:
            rows.append(measure(size, collections, per, size in with_vectors, ns, Path(tmp)))
    columns = list(dict.fromkeys(k for row in rows for k in row))
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row.get(k, "-") for k in columns) + " |")


if __name__ == "__main__":
    main()
