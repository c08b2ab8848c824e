"""The relay attacks of issue 26 (subscriptions), replayed from outside against `tms serve`:
`uv run python bench/attacks_subscriptions.py`.

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`, the relay's default limits), has an approved owner
publish `--texts` evidence texts of about 1.9 MB into a collection with one member, then:

1. stored race: the member's `REQ` (evidence, then claims) is left unread while the owner
   removes it and publishes a claim; counted: events after the `CLOSED`, and that claim
   (target: 0 leaks), `--trials` times on `/c/<slug>` and on `/`;
2. live race: the member subscribes on `/` over two collections; `--trials` times the owner
   removes it from one, publishes a claim there, and adds it back (target: 0 of those claims);
4. memory: `--connections` connections (from 127.0.0.2 to 127.0.0.11, as many addresses)
   each open `--subscriptions` REQs over the evidence and never read, while an honest member
   asks for the latest claims every second and publishes one (target: the server's RSS, its
   own and its children's, at most 200 MB above rest; the honest client served throughout);
8. batch: 10 members subscribe and read promptly; one batch of 6 evidence texts is published
   (target: every subscriber gets all 6, none is closed);
9. buffer: a member's stored answer is left unread while 12 new evidence texts arrive (target:
   RSS flat, that subscription closed in bytes, the memory given back once it leaves);
batches: 10 members subscribe and read promptly; two batches of `--batch-texts` evidence texts
   (30: about the largest body, 64 MiB) are published at once, so that the commit feed finds
   them together (target: every subscriber gets them all, none is closed; RSS bounded);
doors: `--door-batches` batches of `--batch-texts` evidence texts through `/mcp`, and as many
   through the pages' publish (logged in), all at once (target: every batch stored or told to
   retry (503); RSS bounded by the process's two big bodies, not by one per batch sent);
flood: `--flood-connections` connections of a member each send `--flood-events` full-size
   EVENTs (2,000,000 characters of content, escaped as JSON sends them: about 12 MB each)
   without waiting for an OK, while the honest member of attack 4 is served (target: every
   EVENT answered OK; RSS bounded by the budgets, not by 64 in flight of 12 MB each).

Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx
from serving import Server, Signer, call, compact
from websockets.asyncio.client import ClientConnection, connect

MiB: Final = 1024 * 1024
SLUG: Final = "subs"
TEXT: Final = "Evidence, long as a real document is, read by many at once. " * 31_500  # ~1.9 MB


def sign(signer: Signer, kind: int, content: dict[str, Any], when: int | None = None) -> Any:
    return signer.key.sign(kind, compact(content), when or int(time.time())).to_dict()


def bound_socket(url: str, address: str) -> socket.socket:
    """A client socket from `address` (127.0.0.x): the per-address connection cap is the
    connection layer's, not what this bench measures."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.bind((address, 0))
    sock.connect((host, int(port)))
    sock.setblocking(False)
    return sock


class Relay:
    """A raw NIP-01 client."""

    def __init__(self, ws: ClientConnection, url: str, challenge: str) -> None:
        self.ws, self.url, self.challenge = ws, url, challenge

    @classmethod
    async def open(cls, http_url: str, path: str, address: str = "127.0.0.1") -> Relay:
        url = "ws" + http_url.removeprefix("http") + path
        ws = await connect(url, sock=bound_socket(http_url, address), max_size=None, max_queue=1)
        first = json.loads(await asyncio.wait_for(ws.recv(), 30))
        return cls(ws, url, first[1])

    async def send(self, message: Any) -> None:
        await self.ws.send(json.dumps(message))

    async def recv(self, seconds: float = 30) -> Any:
        return json.loads(await asyncio.wait_for(self.ws.recv(), seconds))

    async def auth(self, signer: Signer) -> None:
        tags = [["relay", self.url], ["challenge", self.challenge]]
        event = signer.key.sign(22242, "", int(time.time()), tags).to_dict()
        await self.send(["AUTH", event])
        answer = await self.recv()
        assert answer[2] is True, answer

    async def drain(self, quiet: float) -> list[Any]:
        got = []
        while True:
            try:
                got.append(await self.recv(quiet))
            except (TimeoutError, Exception):
                return got

    async def close(self) -> None:
        await self.ws.close()


METRICS_TOKEN: Final = "bench-" * 5


class Sampler:
    """The server's resident memory (own and children) every 50 ms: the peak above a base; and
    what its relay's budget counts (`tms_relay_memory_bytes`, from /metrics) every 200 ms."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peak = 0
        self.counted = 0  # the budget's peak
        self._stop = threading.Event()

    def now(self) -> int:
        own, children, _ = self.server.memory()
        return own + children

    def budget(self, http: httpx.Client) -> int:
        try:
            text = http.get(
                f"{self.server.url}/metrics",
                headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
            ).text
        except httpx.HTTPError:
            return 0
        for line in text.splitlines():
            if line.startswith("tms_relay_memory_bytes "):
                return int(float(line.split()[1]))
        return 0

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        def sample() -> None:
            with httpx.Client(timeout=5) as http:
                n = 0
                while not self._stop.is_set():
                    self.peak = max(self.peak, self.now())
                    if n % 4 == 0:
                        self.counted = max(self.counted, self.budget(http))
                    n += 1
                    time.sleep(0.05)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


def publish_now(server: Server, events: list[Any]) -> None:
    with httpx.Client(timeout=600) as http:
        result = call(http, server.url, "publish", {"events": events})
        assert isinstance(result, dict), result


async def publish(server: Server, events: list[Any]) -> None:
    """Through `/mcp`, in a thread: the relay clients of this loop go on reading meanwhile."""
    await asyncio.to_thread(publish_now, server, events)


async def received(client: Relay, wanted: set[str], seconds: float) -> tuple[int, bool]:
    """How many of `wanted` a prompt subscriber got, and whether it was closed or told to go
    (a NOTICE, a CLOSED, or nothing for `seconds`)."""
    got, closed = 0, False
    while got < len(wanted):
        try:
            message = await client.recv(seconds)
        except Exception:
            closed = True
            break
        if message[0] == "EVENT" and message[2]["id"] in wanted:
            got += 1
        elif message[0] in ("NOTICE", "CLOSED"):
            closed = True
    return got, closed


def members(owner: Signer, slug: str, keys: list[str], when: int) -> Any:
    return sign(owner, 4705, {"collection": slug, "members": keys}, when)


def claim(owner: Signer, slug: str, text: str) -> Any:
    return sign(owner, 4702, {"collection": slug, "text": text})


async def stored_race(
    server: Server, owner: Signer, member: Signer, trials: int, clock: list[int]
) -> None:
    reader = Signer()
    stays = member.key.pubkey  # the collection's member all along
    leaks = after_claims = closed = 0
    for trial in range(trials):
        path = f"/c/{SLUG}" if trial % 2 == 0 else "/"
        clock[0] += 2
        await publish(server, [members(owner, SLUG, [stays, reader.key.pubkey], clock[0])])
        client = await Relay.open(server.url, path)
        await client.auth(reader)
        await client.send(["REQ", "s", {"kinds": [4701]}, {"kinds": [4702]}])
        await asyncio.sleep(0.5)
        clock[0] += 2
        after = claim(owner, SLUG, f"after the removal {trial} {time.time_ns()}")
        await publish(server, [members(owner, SLUG, [stays], clock[0])])
        await publish(server, [after])
        got = await client.drain(3)
        await client.close()
        where = next((n for n, m in enumerate(got) if m[:2] == ["CLOSED", "s"]), None)
        closed += where is not None
        if where is not None:
            leaks += sum(1 for m in got[where + 1 :] if m[0] == "EVENT")
        after_claims += sum(1 for m in got if m[0] == "EVENT" and m[2]["id"] == after["id"])
    print(
        f"1. stored race, {trials} trials on /c/{SLUG} and /: CLOSED in {closed}; events after "
        f"CLOSED {leaks}; claims published after the removal received {after_claims} "
        "(target: 0 and 0)",
        flush=True,
    )


async def live_race(server: Server, owner: Signer, trials: int, clock: list[int]) -> None:
    person = Signer()
    clock[0] += 2
    await publish(server, [members(owner, f"{SLUG}-a", [person.key.pubkey], clock[0])])
    await publish(server, [members(owner, f"{SLUG}-b", [person.key.pubkey], clock[0])])
    client = await Relay.open(server.url, "/")
    await client.auth(person)
    await client.send(["REQ", "live", {"kinds": [4702], "limit": 0}])
    assert (await client.recv())[0] == "EOSE"
    gone: set[str] = set()
    for trial in range(trials):
        clock[0] += 2
        await publish(server, [members(owner, f"{SLUG}-a", [], clock[0])])
        said = claim(owner, f"{SLUG}-a", f"while removed {trial} {time.time_ns()}")
        gone.add(said["id"])
        await publish(server, [said])
        await publish(server, [members(owner, f"{SLUG}-a", [person.key.pubkey], clock[0] + 1)])
        clock[0] += 1
    done = claim(owner, f"{SLUG}-b", f"done {time.time_ns()}")
    await publish(server, [done])
    got = []
    while True:
        message = await client.recv(30)
        got.append(message)
        if message[0] == "EVENT" and message[2]["id"] == done["id"]:
            break
    await client.close()
    leaked = sum(1 for m in got if m[0] == "EVENT" and m[2]["id"] in gone)
    print(
        f"2. live race on /, {trials} removals: claims received from while removed {leaked} "
        "(target: 0)",
        flush=True,
    )


async def honest(
    server: Server, member: Signer, stop: asyncio.Event, refused: dict[str, int] | None = None
) -> tuple[int, int, float]:
    """An honest member, every second: the latest claims, and a claim published. (asked,
    answered in time, slowest; `refused`: the REQs CLOSED, by what the relay said)."""
    asked = served = 0
    slowest = 0.0
    client = await Relay.open(server.url, f"/c/{SLUG}", "127.0.0.200")
    await client.auth(member)
    while not stop.is_set():
        asked += 1
        started = time.perf_counter()
        try:
            await client.send(["REQ", f"h{asked}", {"kinds": [4702], "limit": 5}])
            while (answer := await client.recv(10))[0] not in ("EOSE", "CLOSED"):
                pass
            if answer[0] == "CLOSED":
                said = answer[2][:60]
                if refused is not None:
                    refused[said] = refused.get(said, 0) + 1
                raise RuntimeError(said)
            said = sign(member, 4702, {"collection": SLUG, "text": f"honest {time.time_ns()}"})
            await client.send(["EVENT", said])
            while (await client.recv(10))[0] != "OK":
                pass
            await client.send(["CLOSE", f"h{asked}"])
            served += 1
        except Exception:
            pass
        slowest = max(slowest, time.perf_counter() - started)
        await asyncio.sleep(1)
    await client.close()
    return asked, served, slowest


async def memory_attack(
    server: Server, member: Signer, connections: int, subscriptions: int, seconds: float
) -> None:
    sampler = Sampler(server)
    rest = sampler.now()
    stop = asyncio.Event()
    answers: dict[str, int] = {}
    refused: dict[str, int] = {}
    with sampler.running():
        helper = asyncio.create_task(honest(server, member, stop, refused))
        clients = []
        for n in range(connections):
            client = await Relay.open(server.url, f"/c/{SLUG}", f"127.0.0.{2 + n % 10}")
            await client.auth(member)
            clients.append(client)
            for s in range(subscriptions):
                await client.send(["REQ", f"m{s}", {"kinds": [4701]}])
        await asyncio.sleep(seconds)
        for client in clients[:1]:  # what the relay said to one of them (it was never read)
            for message in await client.drain(0.5):
                if message[0] in ("CLOSED", "NOTICE"):
                    said = message[-1].split(":")[0]
                    answers[said] = answers.get(said, 0) + 1
        stop.set()
        asked, served, slowest = await helper
        for client in clients:
            await client.close()
    print(
        f"4. memory: {connections} connections x {subscriptions} REQs over the evidence, "
        f"{seconds:g} s: RSS +{(sampler.peak - rest) / MiB:.0f} MiB at peak (target: 200 MB), "
        f"the relay's budget held {sampler.counted / MiB:.0f} MiB at peak; "
        f"server alive: {server.proc is not None and server.proc.poll() is None}; honest "
        f"member served {served} of {asked} (slowest {slowest:.1f} s; its REQs CLOSED: "
        f"{refused or 'none'}); one attacker was told {answers or 'nothing yet'}",
        flush=True,
    )


async def batch_attack(server: Server, member: Signer) -> None:
    readers = []
    for n in range(10):
        client = await Relay.open(server.url, f"/c/{SLUG}")
        await client.auth(member)
        await client.send(["REQ", f"b{n}", {"kinds": [4701], "limit": 0}])
        answer = await client.recv()
        assert answer[0] == "EOSE", answer
        readers.append(client)
    batch = [
        sign(member, 4701, {"collection": SLUG, "text": f"batch {n} {time.time_ns()} {TEXT}"})
        for n in range(6)
    ]
    wanted = {e["id"] for e in batch}
    await publish(server, batch)

    results = await asyncio.gather(*(received(client, wanted, 30) for client in readers))
    for client in readers:
        await client.close()
    complete = sum(1 for got, _ in results if got == len(batch))
    closed = sum(1 for _, was in results if was)
    print(
        f"8. batch: 6 evidence texts of {len(TEXT) / 1e6:.1f} MB in one batch: {complete} of 10 "
        f"prompt subscribers got all 6, {closed} closed (target: 10 and 0)",
        flush=True,
    )


async def buffer_attack(server: Server, member: Signer, new: int) -> None:
    sampler = Sampler(server)
    rest = sampler.now()
    with sampler.running():
        client = await Relay.open(server.url, f"/c/{SLUG}")
        await client.auth(member)
        await client.send(["REQ", "slow", {"kinds": [4701]}])
        await asyncio.sleep(0.5)
        for n in range(new):
            text = f"new {n} {time.time_ns()} {TEXT}"
            await publish(server, [sign(member, 4701, {"collection": SLUG, "text": text})])
        during = sampler.peak
        got = await client.drain(3)
        await client.close()
    await asyncio.sleep(2)
    after = sampler.now()
    ended = [m for m in got if m[0] in ("CLOSED", "NOTICE")]
    print(
        f"9. buffer: {new} new texts behind an unread stored answer: RSS +"
        f"{(during - rest) / MiB:.0f} MiB at peak, +{(after - rest) / MiB:.0f} MiB after the "
        f"reader left; the relay said {[m[-1][:70] for m in ended]}",
        flush=True,
    )


async def batches_attack(server: Server, member: Signer, per_batch: int) -> None:
    sampler = Sampler(server)
    rest = sampler.now()
    with sampler.running():
        readers = []
        for n in range(10):
            client = await Relay.open(server.url, f"/c/{SLUG}")
            await client.auth(member)
            await client.send(["REQ", f"b{n}", {"kinds": [4701], "limit": 0}])
            answer = await client.recv()
            assert answer[0] == "EOSE", answer
            readers.append(client)
        batches = [
            [
                sign(member, 4701, {"collection": SLUG, "text": f"{b} {n} {time.time_ns()} {TEXT}"})
                for n in range(per_batch)
            ]
            for b in range(2)
        ]
        wanted = {e["id"] for batch in batches for e in batch}
        started = time.perf_counter()

        reading = [asyncio.create_task(received(client, wanted, 300)) for client in readers]
        await asyncio.gather(*(publish(server, batch) for batch in batches))
        published = time.perf_counter() - started
        results = await asyncio.gather(*reading)
        for client in readers:
            await client.close()
    complete = sum(1 for got, _ in results if got == len(wanted))
    closed = sum(1 for _, was in results if was)
    print(
        f"batches: two batches of {per_batch} texts of {len(TEXT) / 1e6:.1f} MB at once "
        f"(published in {published:.0f} s): {complete} of 10 prompt subscribers got all "
        f"{len(wanted)}, {closed} closed (target: 10 and 0); RSS +"
        f"{(sampler.peak - rest) / MiB:.0f} MiB at peak",
        flush=True,
    )


async def flood_attack(server: Server, member: Signer, connections: int, events: int) -> None:
    sampler = Sampler(server)
    rest = sampler.now()
    stop = asyncio.Event()
    shell = len(compact({"collection": SLUG, "text": ""}))

    async def flood(n: int) -> tuple[int, int]:
        client = await Relay.open(server.url, f"/c/{SLUG}", f"127.0.0.{50 + n}")
        sent = []
        for k in range(events):
            text = f"{n} {k} {time.time_ns()} "
            text += "\u00e9" * (2_000_000 - shell - len(text))
            sent.append(sign(member, 4701, {"collection": SLUG, "text": text}))
        wanted = {e["id"] for e in sent}

        async def answers() -> tuple[int, int]:
            ok = refused = 0
            while ok + refused < len(wanted):
                message = await client.recv(600)
                if message[0] == "OK" and message[1] in wanted:
                    ok += message[2] is True
                    refused += message[2] is not True
            return ok, refused

        reading = asyncio.create_task(answers())
        for event in sent:
            await client.send(["EVENT", event])
        result = await reading
        await client.close()
        return result

    with sampler.running():
        helper = asyncio.create_task(honest(server, member, stop))
        started = time.perf_counter()
        results = await asyncio.gather(*(flood(n) for n in range(connections)))
        took = time.perf_counter() - started
        stop.set()
        asked, served, slowest = await helper
    print(
        f"flood: {connections} connections x {events} EVENTs of 2,000,000 characters (about "
        f"12 MB each on the wire), sent without waiting: OK true {sum(r[0] for r in results)}, "
        f"false {sum(r[1] for r in results)} in {took:.0f} s; RSS +"
        f"{(sampler.peak - rest) / MiB:.0f} MiB at peak; honest member served {served} of "
        f"{asked} (slowest {slowest:.1f} s)",
        flush=True,
    )


def page_session(server: Server, signer: Signer) -> httpx.Client:
    """A client logged in to the pages as `signer`, sending their Origin and CSRF token."""
    http = httpx.Client(base_url=server.url, timeout=600)
    challenge = http.get("/login/challenge").json()
    tags = [["u", challenge["url"]], ["method", "POST"]]
    event = signer.key.sign(27235, "", int(time.time()), tags)
    header = "Nostr " + base64.b64encode(event.to_json().encode()).decode()
    answer = http.post(challenge["url"], headers={"Authorization": header, "Origin": server.url})
    assert answer.status_code == 200, answer.text
    csrf = http.get("/").text.split('name="tms-csrf" content="')[1].split('"')[0]
    http.headers.update({"Origin": server.url, "X-CSRF-Token": csrf})
    return http


async def doors_attack(server: Server, member: Signer, per_door: int, per_batch: int) -> None:
    """`per_door` batches of `per_batch` evidence texts through `/mcp` and as many through the
    pages' publish, all at once: the big bodies' one budget (`tms.http.bodies.BigBodies`)."""
    batches = [
        [
            sign(member, 4701, {"collection": SLUG, "text": f"d{b} {n} {time.time_ns()} {TEXT}"})
            for n in range(per_batch)
        ]
        for b in range(2 * per_door)
    ]
    bodies = [compact({"events": batch}).encode() for batch in batches[per_door:]]
    pages = [page_session(server, member) for _ in range(per_door)]

    def by_mcp(batch: list[Any]) -> str:
        try:
            publish_now(server, batch)
        except RuntimeError as exc:
            return str(exc)[:80]
        return "ok"

    def by_page(http: httpx.Client, body: bytes) -> str:
        answer = http.post("/publish", content=body)
        return "ok" if answer.status_code == 200 else f"{answer.status_code}"

    sampler = Sampler(server)
    rest = sampler.now()
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    with sampler.running(), ThreadPoolExecutor(2 * per_door) as threads:  # all at once
        said = await asyncio.gather(
            *(loop.run_in_executor(threads, by_mcp, batch) for batch in batches[:per_door]),
            *(
                loop.run_in_executor(threads, by_page, http, body)
                for http, body in zip(pages, bodies, strict=True)
            ),
        )
    for http in pages:
        http.close()
    size = sum(map(len, bodies)) / len(bodies) / MiB
    print(
        f"doors: {per_door} batches through /mcp and {per_door} through the pages, at once, "
        f"each {per_batch} texts ({size:.0f} MiB): {said.count('ok')} stored, others "
        f"{sorted(x for x in said if x != 'ok')} in {time.perf_counter() - started:.0f} s; "
        f"RSS +{(sampler.peak - rest) / MiB:.0f} MiB at peak (rest {rest / MiB:.0f} MiB)",
        flush=True,
    )


async def attack(ns: argparse.Namespace, server: Server) -> None:
    owner, member = Signer(), Signer()
    server.approve(owner.key.pubkey)
    agreement = server.agreement()
    clock = [int(time.time()) - 100_000]
    await publish(server, [owner.sign(4706, agreement)])
    await publish(server, [members(owner, SLUG, [member.key.pubkey], clock[0])])
    await publish(server, [member.sign(4706, agreement)])
    started = time.perf_counter()
    texts = [
        sign(owner, 4701, {"collection": SLUG, "text": f"{n} {TEXT}"}) for n in range(ns.texts)
    ]
    for n in range(0, len(texts), 6):
        await publish(server, texts[n : n + 6])
    print(
        f"{ns.texts} evidence texts of {len(TEXT) / 1e6:.1f} MB published in "
        f"{time.perf_counter() - started:.0f} s; server RSS at rest "
        f"{Sampler(server).now() / MiB:.0f} MiB",
        flush=True,
    )
    only = ns.only or ["1", "2", "4", "8", "9", "batches", "flood", "doors"]
    if "1" in only:
        await stored_race(server, owner, member, ns.trials, clock)
    if "2" in only:
        await live_race(server, owner, ns.trials, clock)
    if "8" in only:
        await batch_attack(server, member)
    if "9" in only:
        await buffer_attack(server, member, 12)
    if "batches" in only:
        await batches_attack(server, member, ns.batch_texts)
    if "doors" in only:
        await doors_attack(server, member, ns.door_batches, ns.batch_texts)
    if "flood" in only:
        await flood_attack(server, member, ns.flood_connections, ns.flood_events)
    if "4" in only:
        await memory_attack(server, member, ns.connections, ns.subscriptions, ns.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=300, help="evidence texts (default 300)")
    parser.add_argument("--connections", type=int, default=100, help="(default 100)")
    parser.add_argument("--subscriptions", type=int, default=100, help="per connection")
    parser.add_argument("--seconds", type=float, default=30, help="the memory attack's length")
    parser.add_argument("--trials", type=int, default=20, help="race trials (default 20)")
    parser.add_argument("--batch-texts", type=int, default=30, help="per batch (default 30)")
    parser.add_argument("--flood-connections", type=int, default=2, help="(default 2)")
    parser.add_argument("--flood-events", type=int, default=32, help="per connection")
    parser.add_argument("--door-batches", type=int, default=8, help="per door (default 8)")
    parser.add_argument(
        "--only", nargs="*", choices=["1", "2", "4", "8", "9", "batches", "flood", "doors"]
    )
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-attacks-subs-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
        env.update(
            TMS_DATA_DIR=str(Path(tmp) / "data"), TMS_EMBED="off", TMS_METRICS_TOKEN=METRICS_TOKEN
        )
        server = Server(env, Path(tmp) / "server.log")
        print(f"tms serve answered /healthz after {server.start():.1f} s", flush=True)
        try:
            asyncio.run(attack(ns, server))
        except Exception:
            print(server.log_tail())
            raise
        finally:
            server.stop()


if __name__ == "__main__":
    main()
