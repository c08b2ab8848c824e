"""tms.nostr.negentropy against nostr-tools' Negentropy (nostr-tools/nip77, the initiator of
NIP-77 clients): nostr-tools reconciles random sets against our Responder to the exact
difference, and our Initiator, fed the same replies, sends byte for byte what nostr-tools sends.
nostr-tools comes from tests/docs/js-current's lockfile (npm ci), as the docs tests install it."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tms.nostr.negentropy import Initiator, Items, Responder

TESTS: Final = Path(__file__).parent.parent
NPM_SECONDS: Final = 300


class Peer:
    """nostr-tools' initiator in a Node process, one JSON line each way."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        assert "error" not in answer, answer
        return answer


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("nostr-tools' Negentropy needs Node.js 20+ and npm on PATH", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="tms-negentropy-js-"))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(TESTS / "docs" / "js-current" / name, root / name)
        shutil.copyfile(TESTS / "assets" / "negentropy_peer.mjs", root / "peer.mjs")
        installed = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=NPM_SECONDS,
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        with subprocess.Popen(
            [node, "peer.mjs"], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as process:
            try:
                yield Peer(process)
            finally:
                process.kill()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _items(rng: random.Random, count: int, spread: int) -> list[tuple[int, bytes]]:
    out = []
    for _ in range(count):
        item_id = os.urandom(32)
        if rng.random() < 0.3:  # ids sharing a long prefix: bounds must carry it
            shared = rng.randrange(1, 25)
            item_id = b"\x07" * shared + os.urandom(32 - shared)
        out.append((1_700_000_000 + rng.randrange(spread), item_id))
    return out


CASES: Final = [
    # (shared, only nostr-tools', only ours, timestamps spread, frameSizeLimit)
    (0, 0, 0, 10, 60_000),
    (0, 0, 3000, 10, 4096),
    (0, 3000, 0, 1000, 4096),
    (5000, 10, 10, 100_000, 60_000),
    (2000, 300, 700, 3, 4096),
    (20_000, 1, 0, 50, 60_000),
    (300, 40, 40, 1, 5000),
]


@pytest.mark.parametrize(("shared", "mine", "theirs", "spread", "frame"), CASES)
def test_nostr_tools_reconciles_against_our_responder_as_our_initiator_does(
    peer: Peer, shared: int, mine: int, theirs: int, spread: int, frame: int
) -> None:
    rng = random.Random(shared * 7 + mine * 3 + theirs + spread)
    common = _items(rng, shared, spread)
    only_js = _items(rng, mine, spread)
    only_ours = _items(rng, theirs, spread)
    js_items = common + only_js
    peer.ask({"items": [[ts, i.hex()] for ts, i in js_items], "frame": frame})
    ours = Initiator(Items.of(js_items), frame)
    responder = Responder(Items.of(common + only_ours), frame)

    message = peer.ask({"op": "initiate"})["msg"]
    assert message == ours.initiate().hex()
    have: set[str] = set()
    need: set[str] = set()
    rounds = 0
    while message is not None:
        rounds += 1
        assert rounds < 500
        reply = responder.respond(bytes.fromhex(message))
        assert len(reply) <= frame
        answer = peer.ask({"op": "reconcile", "msg": reply.hex()})
        mine_next, mine_have, mine_need = ours.reconcile(reply)
        assert answer["msg"] == (None if mine_next is None else mine_next.hex())
        assert sorted(answer["have"]) == sorted(i.hex() for i in mine_have)
        assert sorted(answer["need"]) == sorted(i.hex() for i in mine_need)
        have.update(answer["have"])
        need.update(answer["need"])
        message = answer["msg"]
    assert have == {i.hex() for _, i in only_js}
    assert need == {i.hex() for _, i in only_ours}
