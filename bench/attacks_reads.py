"""The relay read attacks of issue 26 (items 5, 10, 12), replayed against `tms serve`:
`uv run python bench/attacks_reads.py`.

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`), approves a key, signs its terms and makes a
collection with one claim, then writes `--events` events (60,000 by default) by 1,000 authors
straight into its database: claims, `--contradictions` contradictions of two claims each, and
evidence-kind rows (what a read costs is measured, not the publish path; the relay sends stored
rows as they are). Then `VACUUM (ANALYZE) events`, as autovacuum would. Attackers connect from
127.0.0.2, the honest client from 127.0.0.1. Nothing is asserted; targets from the issue are
printed beside the figures.

5. abandoned REQs: `--abandoned` (30) connections each AUTH, send one REQ of 10 filters of 1,000
   authors (about 680 KB), and disconnect at once. Printed: one such REQ's own time to EOSE (the
   issue: 76 s), how long the server's database stays busy with them after they left (the
   issue: all 10 pool connections still busy 80 s later), and an honest one-filter REQ's
   latency meanwhile (the issue: 30-37 s);
10. search: a 10-filter NIP-50 search REQ on contradictions (the issue: 18 s, 2 s a filter),
   first and again, and MCP `search_contradictions` latency;
12. COUNT flood: `--counters` (20) connections sending COUNTs of every claim and contradiction
   back to back for `--seconds` (10): how many were answered or refused, and the honest REQ's
   latency meanwhile (the issue: 5-8 times its latency at rest).

33. NIP-77 priced as one request (issue 33 item 7): `--neg-seconds` (30) of one member key on
   `--neg-addresses` (20) addresses (127.0.0.10 on), a connection each, opening NEG sessions
   over the whole collection back to back (each with another `since`, so that no two share a
   list), while an honest client reads (a one-filter REQ every 200 ms) and another key
   publishes (one claim through `/mcp` every 200 ms): both latencies at rest and meanwhile,
   and how many NEG-OPENs were answered or refused (the issue: 421 lists in 30 s, the relay 65
   times slower, publish 7 times).

`--parts` picks the attacks (`abandoned,search,counts,negentropy`, all by default).
`--default-limits` keeps the default `TMS_RATE_ADDRESS`, `TMS_RATE_KEY` and `TMS_RATE_READ`
(benchmarks turn rate limits off), to see what the relay's prices leave an attacker.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
from serving import HEADERS, Server, Signer, call, compact
from websockets.asyncio.client import ClientConnection, connect

from tms.guard import rates
from tms.nostr.negentropy import Initiator, Items
from tms.store.database import embedded_url, start_embedded

COLLECTION: Final = "reads"
AUTHORS: Final = 1000
ATTACKER: Final = "127.0.0.2"
WORDS: Final = [
    "histamine", "diamine", "oxidase", "enzyme", "intolerance", "migraine", "allergy",
    "fermented", "cheese", "wine",
]  # fmt: skip


def author(n: int) -> str:
    return hashlib.sha256(f"author {n}".encode()).hexdigest()


def ms(values: Sequence[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"median {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {ordered[-1] * 1000:.0f} ms (n={len(ordered)})"
    )


# --- the data ------------------------------------------------------------------------------------


def seed_sql(events: int, contradictions: int) -> str:
    """Rows `g` 1..2C are claims, 2C+1..3C contradictions of claims 2n-1 and 2n, the rest
    evidence-kind events; author g % 1000, created_at growing with g. The events' seqs are
    read back by id, so the typed rows point at them whatever seqs the server used already."""
    claims = 2 * contradictions
    words = "ARRAY[" + ",".join(f"'{w}'" for w in WORDS) + "]"
    return f"""
    CREATE TEMP TABLE seedrows AS
    SELECT g,
           encode(sha256(('event ' || g)::bytea), 'hex') AS id,
           encode(sha256(('author ' || (g % {AUTHORS}))::bytea), 'hex') AS pubkey,
           CASE WHEN g <= {claims} THEN 4702 WHEN g <= {claims + contradictions} THEN 4704
                ELSE 4701 END AS kind,
           ({words})[1 + g % 10] || ' and ' || ({words})[1 + (g / 10) % 10]
               || ' in case ' || g AS words
    FROM generate_series(1, {events}) AS g;
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    SELECT id, pubkey, 1700000000 + g, kind, '[]',
           CASE WHEN kind = 4704 THEN json_build_object(
                    'collection', '{COLLECTION}', 'reason', 'They disagree on ' || words,
                    'claims', json_build_array(
                        encode(sha256(('event ' || (2 * (g - {claims}) - 1))::bytea), 'hex'),
                        encode(sha256(('event ' || (2 * (g - {claims})))::bytea), 'hex')))::text
                ELSE json_build_object('collection', '{COLLECTION}', 'text', words)::text END,
           repeat('0', 128), '{COLLECTION}'
    FROM seedrows ORDER BY g;
    INSERT INTO claims (id, seq, collection, pubkey, text)
    SELECT s.id, e.seq, '{COLLECTION}', s.pubkey, 'Claim: ' || s.words
    FROM seedrows s JOIN events e ON e.id = s.id AND e.collection = '{COLLECTION}'
    WHERE s.kind = 4702;
    INSERT INTO contradictions (id, seq, collection, pubkey, reason)
    SELECT s.id, e.seq, '{COLLECTION}', s.pubkey, 'They disagree on ' || s.words
    FROM seedrows s JOIN events e ON e.id = s.id AND e.collection = '{COLLECTION}'
    WHERE s.kind = 4704;
    INSERT INTO contradiction_claims (contradiction_id, claim_id, collection)
    SELECT s.id, encode(sha256(('event ' || (2 * (s.g - {claims}) - k))::bytea), 'hex'),
           '{COLLECTION}'
    FROM seedrows s, generate_series(0, 1) AS k WHERE s.kind = 4704;
    UPDATE collection_counts SET
        claims = claims + (SELECT count(*) FROM seedrows WHERE kind = 4702),
        contradictions = contradictions + (SELECT count(*) FROM seedrows WHERE kind = 4704),
        evidence = evidence + (SELECT count(*) FROM seedrows WHERE kind = 4701)
    WHERE collection = '{COLLECTION}';"""


async def seed(data_dir: Path, events: int, contradictions: int) -> asyncpg.Connection:
    conn = await asyncpg.connect(await embedded_url(await start_embedded(data_dir)))
    started = time.perf_counter()
    await conn.execute(seed_sql(events, contradictions))
    await conn.execute("VACUUM (ANALYZE) events")
    await conn.execute("ANALYZE")
    print(f"seeded {events:,} events ({contradictions:,} contradictions) in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    return conn


# --- relay clients -------------------------------------------------------------------------------


class Relay:
    def __init__(self, server: Server, signer: Signer) -> None:
        self.server = server
        self.url = f"ws://127.0.0.1:{server.port}/c/{COLLECTION}"
        self.signer = signer

    async def open(self, source: str = "127.0.0.1") -> ClientConnection:
        ws = await connect(self.url, max_size=None, local_addr=(source, 0), open_timeout=60)
        challenge = json.loads(await ws.recv())[1]
        tags = [["relay", self.url], ["challenge", challenge]]
        for _ in range(30):  # as a client does when told `rate-limited:` (--default-limits)
            event = self.signer.key.sign(22242, "", int(time.time()), tags)
            await ws.send(json.dumps(["AUTH", event.to_dict()]))
            answer = json.loads(await ws.recv())
            if answer[2] is True:
                return ws
            if not answer[3].startswith("rate-limited:"):
                break
            await asyncio.sleep(1)
        raise RuntimeError(f"AUTH refused: {answer}")


async def answer(ws: ClientConnection, sub: str, *filters: dict[str, Any]) -> tuple[float, Any]:
    """Seconds until the stored answer ends, and how it ended (EOSE, CLOSED, COUNT)."""
    started = time.perf_counter()
    await ws.send(json.dumps(["REQ", sub, *filters]))
    while True:
        message = json.loads(await ws.recv())
        if message[0] in ("EOSE", "CLOSED") and message[1] == sub:
            took = time.perf_counter() - started
            if message[0] == "EOSE":
                await ws.send(json.dumps(["CLOSE", sub]))
            return took, message


HONEST: Final = {"kinds": [4702], "limit": 20}


class Honest:
    """One honest client asking a one-filter REQ every 200 ms, its latencies kept."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.latencies: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Honest:
        ws = await self.relay.open()
        self._task = asyncio.create_task(self._run(ws))
        return self

    async def _run(self, ws: ClientConnection) -> None:
        n = 0
        try:
            while True:
                n += 1
                took, _ = await answer(ws, f"h{n}", HONEST)
                self.latencies.append(took)
                await asyncio.sleep(0.2)
        finally:
            await ws.close()

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def baseline(relay: Relay, times: int = 20) -> list[float]:
    ws = await relay.open()
    try:
        return [(await answer(ws, f"b{n}", HONEST))[0] for n in range(times)]
    finally:
        await ws.close()


async def busy(conn: asyncpg.Connection) -> int:
    """Statements of the server's relay reads still running on the database."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND pid <> pg_backend_pid() AND query LIKE '%FROM events%' "
            "AND query NOT LIKE '%pg_stat_activity%'"
        )
    )


# --- the attacks ---------------------------------------------------------------------------------


def big_req() -> list[dict[str, Any]]:
    """Ten filters as large as a filter may be: 999 authors and a kind (1,000 values in all,
    `tms.nostr.filters.MAX_VALUES`; the issue's 1,000 authors and a kind are refused now)."""
    authors = [author(n) for n in range(AUTHORS - 1)]
    return [{"authors": authors, "kinds": [4701 + n % 4], "limit": 500} for n in range(10)]


async def attack_abandoned(relay: Relay, conn: asyncpg.Connection, count: int) -> None:
    filters = big_req()
    size = len(compact(["REQ", "a", *filters]))
    rest = await baseline(relay)
    print(f"\n5. abandoned REQs: one REQ of 10 filters x 999 authors is {size / 1000:.0f} KB")
    print(f"   honest REQ at rest: {ms(rest)}")
    ws = await relay.open(ATTACKER)
    try:
        took, end = await answer(ws, "whole", *filters)
    finally:
        await ws.close()
    said = f" {end[2]}" if end[0] == "CLOSED" else ""
    print(f"   one such REQ read to its end: {took:.2f} s ({end[0]}{said}) (issue: 76 s)")
    async with Honest(relay) as honest:
        started = time.perf_counter()

        async def abandon(n: int) -> str:
            ws = await relay.open(ATTACKER)
            await ws.send(json.dumps(["REQ", f"a{n}", *filters]))
            await asyncio.sleep(0.05)  # the message is on its way
            # Gone without a word: a polite close would wait for the server's answer behind
            # the stored events it sends, which this client does not read (10 s of timeout).
            ws.transport.abort()
            return "sent"

        await asyncio.gather(*(abandon(n) for n in range(count)))
        sent = time.perf_counter() - started
        peak = 0
        drained: float | None = None
        while time.perf_counter() - started < 120:
            now = await busy(conn)
            peak = max(peak, now)
            if now == 0 and time.perf_counter() - started > sent + 0.5:
                drained = time.perf_counter() - started
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(1)
    said = f"{drained:.1f} s" if drained is not None else "over 120 s"
    print(f"   {count} sent and abandoned in {sent:.1f} s; the database busy with reads until "
          f"{said} after the first (at most {peak} statements at once) (issue: all 10 pool "
          f"connections busy 80 s later)")  # fmt: skip
    print(f"   honest REQ meanwhile: {ms(honest.latencies)} (issue: 30-37 s)")


async def attack_search(relay: Relay, server: Server, signer: Signer) -> None:
    print("\n10. contradiction search")
    ws = await relay.open(ATTACKER)
    filters = [{"search": f"{w} disagree", "kinds": [4704], "limit": 20} for w in WORDS]
    try:
        for label in ("first (builds the documents, where that is done)", "again"):
            took, end = await answer(ws, f"s{label[:5]}", *filters)
            print(f"   a 10-filter search REQ on contradictions, {label}: {took:.2f} s "
                  f"({end[0]}) (issue: 18 s)")  # fmt: skip
    finally:
        await ws.close()
    latencies = []
    with httpx.Client(timeout=120) as http:
        for word in WORDS:
            args = {"collection": COLLECTION, "text": f"{word} cheese"}
            started = time.perf_counter()
            call(
                http,
                server.url,
                "search_contradictions",
                {"request": signer.request("search_contradictions", args)},
            )
            latencies.append(time.perf_counter() - started)
    print(f"   MCP search_contradictions: {ms(latencies)} (issue: about 2 s)")


async def attack_counts(relay: Relay, count: int, seconds: float) -> None:
    print(f"\n12. COUNT flood: {count} connections for {seconds:.0f} s")
    rest = await baseline(relay)
    print(f"   honest REQ at rest: {ms(rest)}")
    tally = {"COUNT": 0, "CLOSED": 0}
    reasons: dict[str, int] = {}
    stop = time.perf_counter() + seconds

    async def flood(n: int) -> None:
        ws = await relay.open(ATTACKER)
        try:
            k = 0
            while time.perf_counter() < stop:
                k += 1
                await ws.send(json.dumps(["COUNT", f"c{k}", {"kinds": [4702, 4704]}]))
                message = json.loads(await ws.recv())
                tally[message[0]] = tally.get(message[0], 0) + 1
                if message[0] == "CLOSED":
                    reason = message[2].split(":", 1)[0]
                    reasons[reason] = reasons.get(reason, 0) + 1
                    await asyncio.sleep(0.1)
        finally:
            await ws.close()

    async with Honest(relay) as honest:
        await asyncio.gather(*(flood(n) for n in range(count)))
    print(f"   COUNTs answered {tally['COUNT']:,}, refused {tally['CLOSED']:,} {reasons or ''}")
    print(f"   honest REQ meanwhile: {ms(honest.latencies)} (issue: 5-8 times at rest)")


class Publisher:
    """One honest key publishing a claim through `/mcp` every 200 ms, its latencies kept."""

    def __init__(self, server: Server, signer: Signer) -> None:
        self.server = server
        self.signer = signer
        self.latencies: list[float] = []
        self.failed: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Publisher:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=120) as http:
            n = 0
            while True:
                n += 1
                event = self.signer.sign(
                    4702, {"collection": COLLECTION, "text": f"honest {n} {time.time_ns()}"}
                )
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "publish", "arguments": {"events": [event]}},
                }
                started = time.perf_counter()
                response = await http.post(
                    f"{self.server.url}/mcp",
                    content=compact(body).encode(),
                    headers=HEADERS,
                )
                took = time.perf_counter() - started
                result = response.json().get("result", {}) if response.status_code == 200 else {}
                if response.status_code != 200 or result.get("isError"):
                    self.failed.append(response.text[:120])
                else:
                    self.latencies.append(took)
                await asyncio.sleep(0.2)

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def attack_negentropy(
    relay: Relay, owner: Signer, attacker: Relay, addresses: int, seconds: float
) -> None:
    print(f"\n33. NEG sessions: one key on {addresses} addresses for {seconds:.0f} s")
    empty = Initiator(Items.of([])).initiate().hex()
    async with Honest(relay) as honest, Publisher(relay.server, owner) as publisher:
        await asyncio.sleep(10)
    print(f"   at rest: honest REQ {ms(honest.latencies)}")
    print(f"            publish {ms(publisher.latencies)}")
    tally: dict[str, int] = {}
    reasons: dict[str, int] = {}
    stop = time.perf_counter() + seconds

    async def sessions(n: int) -> None:
        ws = await attacker.open(f"127.0.0.{10 + n}")
        try:
            k = 0
            while time.perf_counter() < stop:
                k += 1
                wanted = {"since": 1700000000 + (n * 1000 + k) % 50}  # never one list twice
                await ws.send(json.dumps(["NEG-OPEN", f"n{k}", wanted, empty]))
                message = json.loads(await ws.recv())
                await ws.send(json.dumps(["NEG-CLOSE", f"n{k}"]))
                tally[message[0]] = tally.get(message[0], 0) + 1
                if message[0] == "NEG-ERR":
                    reason = message[2].split(":", 1)[0]
                    reasons[reason] = reasons.get(reason, 0) + 1
                    await asyncio.sleep(0.1)
        finally:
            await ws.close()

    async with Honest(relay) as honest, Publisher(relay.server, owner) as publisher:
        await asyncio.gather(*(sessions(n) for n in range(addresses)))
    answered, refused = tally.get("NEG-MSG", 0), tally.get("NEG-ERR", 0)
    print(f"   NEG-OPENs answered {answered:,} (lists built), refused {refused:,} {reasons or ''}")
    print(f"   meanwhile: honest REQ {ms(honest.latencies)} (issue: 65 times at rest)")
    print(f"              publish {ms(publisher.latencies)}, failed {len(publisher.failed)} "
          "(issue: 7 times at rest)")  # fmt: skip


# --- the run -------------------------------------------------------------------------------------


async def attacks(
    ns: argparse.Namespace, server: Server, signer: Signer, attacker: Signer, data_dir: Path
) -> None:
    conn = await seed(data_dir, ns.events, ns.contradictions)
    parts = set(ns.parts.split(","))
    try:
        relay = Relay(server, signer)
        if "abandoned" in parts:
            await attack_abandoned(relay, conn, ns.abandoned)
        if "search" in parts:
            await attack_search(relay, server, signer)
        if "counts" in parts:
            await attack_counts(relay, ns.counters, ns.seconds)
        if "negentropy" in parts:
            await attack_negentropy(
                relay, signer, Relay(server, attacker), ns.neg_addresses, ns.neg_seconds
            )
    finally:
        await conn.close()


def run(ns: argparse.Namespace, tmp: Path) -> None:
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(data_dir), TMS_EMBED="off")
    if ns.default_limits:
        env.update(TMS_RATE_ADDRESS=rates.DEFAULT_ADDRESS, TMS_RATE_KEY=rates.DEFAULT_KEY)
        read = getattr(rates, "DEFAULT_READ", None)  # absent from code before issue 33
        if read is not None:
            env.update(TMS_RATE_READ=read)
    server = Server(env, tmp / "server.log")
    signer = Signer()
    attacker = Signer()  # a member: reads, never writes
    print(f"tms serve answered /healthz after {server.start():.1f} s", flush=True)
    try:
        server.approve(signer.key.pubkey)
        with httpx.Client(timeout=60) as http:
            terms = server.agreement()
            first = signer.sign(4702, {"collection": COLLECTION, "text": "The first claim."})
            listed = signer.sign(4705, {"collection": COLLECTION, "members": [attacker.key.pubkey]})
            call(
                http,
                server.url,
                "publish",
                {"events": [signer.sign(4706, terms), first, listed]},
            )
        asyncio.run(attacks(ns, server, signer, attacker, data_dir))
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000, help="events (default 60000)")
    parser.add_argument("--contradictions", type=int, default=5_000, help="of them (default 5000)")
    parser.add_argument("--abandoned", type=int, default=30, help="abandoned REQs (default 30)")
    parser.add_argument("--counters", type=int, default=20, help="COUNT flooders (default 20)")
    parser.add_argument("--seconds", type=float, default=10, help="COUNT flood (default 10 s)")
    parser.add_argument(
        "--parts",
        default="abandoned,search,counts,negentropy",
        help="which attacks (default: abandoned,search,counts,negentropy)",
    )
    parser.add_argument(
        "--neg-addresses", type=int, default=20, help="one key's addresses (default 20)"
    )
    parser.add_argument(
        "--neg-seconds", type=float, default=30, help="NEG sessions opened for (default 30 s)"
    )
    parser.add_argument(
        "--default-limits",
        action="store_true",
        help="keep the default TMS_RATE_ADDRESS, _KEY and _READ (benchmarks turn them off)",
    )
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-reads-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
