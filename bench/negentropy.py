"""NIP-77 (negentropy) against a plain REQ download: one collection of N tiny claims.

    uv run python bench/negentropy.py                          # 100,000 and 1,000,000 events
    uv run python bench/negentropy.py --sizes 100000 --req-max 100000
    uv run python bench/negentropy.py --sizes 1000000 --parts end-to-end --runs ten --repeat 3

1. The algorithm alone (tms.nostr.negentropy, in process, both roles, the relay's
   frameSizeLimit and a client's 60,000): from empty, and with 10 events differing (the client
   lacks 10 of the relay's); wall time, rounds, bytes of the NEG-MSGs as hex.
2. End to end: `tms serve` over a fresh embedded PostgreSQL; the collection's events are
   inserted with SQL COPY straight into `events` (synthetic rows: random ids and signatures,
   no claim rows; NIP-77 and REQ read `events` only), then vacuumed, as a table is in use. One
   client process, raw WebSockets, authenticated by NIP-42, tms.nostr.negentropy's Initiator
   as its NIP-77 side:
   - NIP-77 from empty: reconcile, then fetch the needed events with REQs of 100 ids, 8 at
     once;
   - NIP-77 with 10 differing: the client holds all but 10; reconcile, fetch those 10
     (`--repeat` sessions in a row: the first after the server started reads the collection's
     items from the database, the next ones find them kept);
   - plain REQ download of the same events: REQs of `limit` 1,000 paged by `until` (up to
     --req-max events; past that the figure is extrapolated from the pages done, and said so).
   With `--restart`, `tms serve` is stopped and started again after the events are inserted,
   and the runs begin as soon as it answers /healthz: the first session then meets the server
   as it is after a restart (its lists loading in the background from the start,
   TMS_NEG_WARM; `--warm 0` turns that off, to time the first session's own read; `--settle S`
   waits S seconds first).
   Each: wall time, bytes on the wire (WebSocket payloads both ways), and the server's peak
   resident memory (VmHWM) over its start-up level.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
import numpy as np
from serving import Server, Signer, call
from websockets.asyncio.client import ClientConnection, connect

from tms.guard import rates
from tms.nostr.negentropy import Initiator, Items, Responder
from tms.relay.limits import NEG_FRAME_BYTES
from tms.store.database import embedded_url, start_embedded

SLUG: Final = "bench"
CLIENT_FRAME: Final = 60_000  # nostr-sdk's and nostr-tools' frameSizeLimit
T0: Final = 1_700_000_000
BATCH: Final = 1000  # a plain REQ download's limit, the relay's max_limit
# A NIP-77 client fetches what it needs by id: REQs of one stored page's worth (100: a REQ of
# 1,000 ids is answered in 10 pages, each looking all 1,000 up again), several in flight.
FETCH: Final = {"batch": 100, "in_flight": 8}  # --id-batch, --in-flight; and "limited"
LIMITS: Final[dict[str, str]] = {}  # the server's rate limits (--default-limits)


# --- 1. the algorithm alone ------------------------------------------------------------------


def algorithm(n: int) -> None:
    rng = np.random.default_rng(n)
    ts = (T0 + np.arange(n) // 3).astype(np.uint64)
    ids = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    # In the index's order, as the relay reads them (sql/022): sealing then only checks it.
    # (ts grows with the row: ids in order overall are in order within each timestamp.)
    ids = ids[np.argsort(ids.view(">u8")[:, 0] >> np.uint64(1), kind="stable")]
    started = time.perf_counter()
    relay = Items(ts, ids)
    built = time.perf_counter() - started
    keep = np.ones(n, dtype=bool)
    keep[rng.choice(n, 10, replace=False)] = False
    client = Items(ts[keep], ids[keep])
    for name, mine in (("from empty", Items.of([])), ("10 differing", client)):
        started = time.perf_counter()
        initiator = Initiator(mine, CLIENT_FRAME)
        responder = Responder(relay, NEG_FRAME_BYTES)
        message: bytes | None = initiator.initiate()
        wire = rounds = needed = 0
        while message is not None:
            wire += 2 * len(message)
            reply = responder.respond(message)
            wire += 2 * len(reply)
            message, _, need = initiator.reconcile(reply)
            needed += len(need)
            rounds += 1
        took = time.perf_counter() - started
        print(
            f"1. algorithm, {n:>9,} items, {name:<12}: {took:6.3f} s, {rounds:4} rounds, "
            f"{wire / 1000:9,.1f} kB as hex, {needed:,} ids needed (items built in {built:.2f} s)",
            flush=True,
        )


# --- 2. end to end ---------------------------------------------------------------------------


class Wire:
    """A client connection that counts the payload bytes each way."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.sent = 0
        self.received = 0

    async def send(self, message: Any) -> None:
        text = json.dumps(message, separators=(",", ":"))
        self.sent += len(text)
        await self.ws.send(text)

    async def recv(self) -> list[Any]:
        text = await self.ws.recv()
        assert isinstance(text, str)
        self.received += len(text)
        answer: list[Any] = json.loads(text)
        return answer

    @property
    def total(self) -> int:
        return self.sent + self.received


async def open_wire(url: str, signer: Signer) -> Wire:
    ws = await connect(url, max_size=None)
    challenge = json.loads(await ws.recv())[1]
    auth = signer.key.sign(22242, "", int(time.time()), [["relay", url], ["challenge", challenge]])
    await ws.send(json.dumps(["AUTH", auth.to_dict()]))
    ok = json.loads(await ws.recv())
    assert ok[0] == "OK" and ok[2] is True, ok
    return Wire(ws)


async def req(wire: Wire, sub: str, wanted: dict[str, Any]) -> list[dict[str, Any]]:
    await wire.send(["REQ", sub, wanted])
    events = []
    while True:
        message = await wire.recv()
        if message[0] == "EVENT":
            events.append(message[2])
        elif message[0] in ("EOSE", "CLOSED"):
            if message[0] == "EOSE":
                await wire.send(["CLOSE", sub])
            return events


async def negentropy(wire: Wire, mine: Items, most: int) -> tuple[int, int, float, int]:
    """Reconcile, then fetch what is needed (up to `most` events): (rounds, events fetched,
    reconcile seconds, events needed)."""
    started = time.perf_counter()
    initiator = Initiator(mine, CLIENT_FRAME)
    await wire.send(["NEG-OPEN", "neg", {"kinds": [4702]}, initiator.initiate().hex()])
    need: list[bytes] = []
    rounds = 0
    while True:
        answer = await wire.recv()
        assert answer[0] == "NEG-MSG", answer
        rounds += 1
        message, _, needs = initiator.reconcile(bytes.fromhex(answer[2]))
        need.extend(needs)
        if message is None:
            break
        await wire.send(["NEG-MSG", "neg", message.hex()])
    await wire.send(["NEG-CLOSE", "neg"])
    reconciled = time.perf_counter() - started
    fetched = 0
    wanted = [i.hex() for i in need[:most]]
    batch, in_flight = FETCH["batch"], FETCH["in_flight"]
    for at in range(0, len(wanted), batch * in_flight):
        fetched += await fetch_ids(wire, wanted[at : at + batch * in_flight], batch)
    return rounds, fetched, reconciled, len(need)


async def fetch_ids(wire: Wire, ids: list[str], batch: int) -> int:
    """The events of these ids: REQs of `batch` ids, all sent at once; how many came."""
    open_subs: dict[str, list[str]] = {}
    for k in range(0, len(ids), batch):
        sub = f"get{k // batch}"
        chunk = ids[k : k + batch]
        await wire.send(["REQ", sub, {"ids": chunk, "limit": len(chunk)}])
        open_subs[sub] = chunk
    got = 0
    while open_subs:
        message = await wire.recv()
        if message[0] == "EVENT":
            got += 1
        elif message[0] == "CLOSED" and message[2].startswith("rate-limited:"):
            # As a client paces itself (--default-limits): the seconds it is told, then again.
            FETCH["limited"] = FETCH.get("limited", 0) + 1
            retry = re.search(r"try again in (\d+) s", message[2])
            await asyncio.sleep(int(retry.group(1)) if retry else 1)
            chunk = open_subs[message[1]]
            await wire.send(["REQ", message[1], {"ids": chunk, "limit": len(chunk)}])
        elif message[0] in ("EOSE", "CLOSED") and message[1] in open_subs:
            del open_subs[message[1]]
            if message[0] == "EOSE":
                await wire.send(["CLOSE", message[1]])
    return got


async def req_download(wire: Wire, n: int, most: int) -> tuple[int, bool]:
    """REQ pages of 1,000 by `until` (created_at is unique and grows with seq here)."""
    until = T0 + n
    got = 0
    while got < min(n, most):
        page = await req(wire, "all", {"kinds": [4702], "until": until, "limit": BATCH})
        if not page:
            return got, True
        got += len(page)
        until = min(e["created_at"] for e in page) - 1
    return got, got >= n


def peak(server: Server) -> int:
    """The server's peak resident memory (VmHWM) so far, in bytes."""
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def reset_peak(server: Server) -> None:
    """Let VmHWM start again from the current resident size (Linux: write 5 to clear_refs)."""
    assert server.proc is not None
    with contextlib.suppress(OSError):
        Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")


async def fill(database_url: str, signer: Signer, n: int) -> list[tuple[int, bytes]]:
    """N tiny claims in `bench`, by COPY: created_at T0 + i (unique), random ids."""
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    hexes = [row.tobytes().hex() for row in raw]
    sig = "0" * 128
    content = json.dumps({"collection": SLUG, "text": "x"}, separators=(",", ":"))
    conn = await asyncpg.connect(database_url)
    try:
        records = (
            (hexes[i], signer.key.pubkey, T0 + i, 4702, "[]", content, sig, SLUG) for i in range(n)
        )
        await conn.copy_records_to_table(
            "events",
            records=records,
            columns=["id", "pubkey", "created_at", "kind", "tags", "content", "sig", "collection"],
        )
        # What the write path keeps for every publish: the relay prices a NEG-OPEN by it.
        await conn.execute(
            "UPDATE collection_counts SET claims = claims + $2 WHERE collection = $1", SLUG, n
        )
        await conn.execute("VACUUM ANALYZE events")
    finally:
        await conn.close()
    return [(T0 + i, raw[i].tobytes()) for i in range(n)]


def end_to_end(
    n: int,
    req_max: int,
    tmp: Path,
    chosen: set[str],
    repeat: int,
    alternate: int,
    restart: bool = False,
    warm: int | None = None,
    settle: float = 0.0,
) -> None:
    """`req_max`: events either download fetches at most (past it: extrapolated, and said);
    `chosen`: the runs (empty, ten, req); `repeat`: how many 10-differing sessions, one after
    the other; `alternate`: how many times from empty and REQ are run, in turn; `restart`:
    the server restarted once the events are in; `warm`: its TMS_NEG_WARM (None: default);
    `settle`: seconds waited after the restart before the runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(tmp / "data"), TMS_EMBED="off", **LIMITS)
    if warm is not None:
        env.update(TMS_NEG_WARM=str(warm))
    server = Server(env, tmp / "server.log")
    server.start()
    signer = Signer()
    try:
        server.approve(signer.key.pubkey)
        start = signer.sign(4702, {"collection": SLUG, "text": "Start."})  # makes the collection
        with httpx.Client(timeout=60) as http:
            events = [signer.sign(4706, server.agreement()), start]
            call(http, server.url, "publish", {"events": events})
        database_url = asyncio.run(_database_url(tmp / "data"))
        started = time.perf_counter()
        items = asyncio.run(fill(database_url, signer, n))
        took = time.perf_counter() - started
        print(f"2. {n:,} events inserted by COPY and vacuumed in {took:.1f} s")
        if restart:
            server.stop()
            ready = server.start()
            print(f"2. tms serve restarted: /healthz answered in {ready:.2f} s", flush=True)
            time.sleep(settle)
        url = server.url.replace("http", "ws") + f"/c/{SLUG}"
        items.append((start["created_at"], bytes.fromhex(start["id"])))
        all_but_ten = Items.of(items[:-11] + items[-1:])  # 10 the relay's alone

        def nip77(name: str, mine: Items) -> None:
            reset_peak(server)
            base = peak(server)
            started = time.perf_counter()
            wire = asyncio.run(_with_wire(url, signer, lambda w: negentropy(w, mine, req_max)))
            took = time.perf_counter() - started
            rounds, fetched, reconciled, needed = wire[1]
            rest = (took - reconciled) * needed / fetched if fetched else 0.0
            note = (
                ""
                if fetched == needed
                else f" (stopped at {fetched:,} of {needed:,}; all at this rate: "
                f"{reconciled + rest:,.0f} s)"
            )
            print(
                f"2. {n:>9,} events, {name:<21}: {took:7.2f} s ({reconciled:.2f} s reconciling, "
                f"{rounds} rounds), {wire[0].total / 1000:11,.1f} kB on the wire, {fetched:,} "
                f"events fetched, server peak +{(peak(server) - base) / 2**20:,.0f} MB{note}"
                f"{', REQs told rate-limited: ' + str(FETCH.pop('limited', 0)) if LIMITS else ''}",
                flush=True,
            )

        def plain_req() -> None:
            reset_peak(server)
            base = peak(server)
            started = time.perf_counter()
            wire = asyncio.run(_with_wire(url, signer, lambda w: req_download(w, n, req_max)))
            took = time.perf_counter() - started
            got, complete = wire[1]
            note = (
                ""
                if complete
                else f" (stopped at {got:,}; all {n:,} at this rate: {took * n / got:,.0f} s)"
            )
            print(
                f"2. {n:>9,} events, plain REQ download   : {took:7.2f} s, "
                f"{wire[0].total / 1000:11,.1f} kB on the wire, {got:,} events, server peak "
                f"+{(peak(server) - base) / 2**20:,.0f} MB{note}",
                flush=True,
            )

        # From empty and the plain REQ download, one after the other (`alternate` times): on
        # a shared machine, a comparison is only fair between runs close in time.
        for _ in range(alternate):
            if "empty" in chosen:
                nip77("NIP-77 from empty", Items.of([]))
            if "req" in chosen:
                plain_req()
        if "ten" in chosen:
            # The first session after the server started reads the collection's items from
            # the database (unless a session from empty did); the next ones (the server keeps
            # them) only what was added since.
            for k in range(repeat):
                nip77(f"NIP-77, 10 differing #{k + 1}", all_but_ten)
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()


async def _with_wire(url: str, signer: Signer, run: Any) -> tuple[Wire, Any]:
    wire = await open_wire(url, signer)
    try:
        return wire, await run(wire)
    finally:
        await wire.ws.close()


async def _database_url(data_dir: Path) -> str:
    return await embedded_url(await start_embedded(data_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="collection sizes")
    parser.add_argument(
        "--req-max", type=int, default=200_000, help="events a plain REQ download fetches at most"
    )
    parser.add_argument("--parts", default="algorithm,end-to-end")
    parser.add_argument(
        "--runs", default="empty,ten,req", help="end-to-end runs: empty, ten (differing), req"
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="10-differing sessions in a row (the first is cold)"
    )
    parser.add_argument(
        "--alternate", type=int, default=1, help="from empty and REQ, in turn, this many times"
    )
    parser.add_argument(
        "--restart", action="store_true", help="restart tms serve once the events are in"
    )
    parser.add_argument(
        "--warm", type=int, default=None, help="the server's TMS_NEG_WARM (default: its own)"
    )
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds after the restart before the runs"
    )
    parser.add_argument("--id-batch", type=int, default=100, help="ids per REQ after NIP-77")
    parser.add_argument("--in-flight", type=int, default=8, help="those REQs sent at once")
    parser.add_argument(
        "--default-limits",
        action="store_true",
        help="the default TMS_RATE_ADDRESS, _KEY and _READ (off otherwise); the client then "
        "waits as each rate-limited: says, and the refusals are counted",
    )
    ns = parser.parse_args()
    if ns.default_limits:
        LIMITS.update(
            TMS_RATE_ADDRESS=rates.DEFAULT_ADDRESS,
            TMS_RATE_KEY=rates.DEFAULT_KEY,
        )
        read = getattr(rates, "DEFAULT_READ", None)  # absent from code before issue 33
        if read is not None:
            LIMITS.update(TMS_RATE_READ=read)
    FETCH.update(batch=ns.id_batch, in_flight=ns.in_flight)
    sizes = [int(s) for s in ns.sizes.split(",")]
    if "algorithm" in ns.parts:
        for n in sizes:
            algorithm(n)
    if "end-to-end" in ns.parts:
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix="tms-bench-neg-") as tmp:
                end_to_end(
                    n,
                    ns.req_max,
                    Path(tmp),
                    set(ns.runs.split(",")),
                    ns.repeat,
                    ns.alternate,
                    ns.restart,
                    ns.warm,
                    ns.settle,
                )


if __name__ == "__main__":
    main()
