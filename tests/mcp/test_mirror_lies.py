"""`tms mirror` against a relay that lies (`fake_relay`: a server with a log key of its own):
each lie ends with one clear line, or is outlived, within bounded time and memory, and the copy
made before it is left exactly as it was. Before, an endless NIP-77 exchange grew the mirror
without end, a checkpoint of size 2^40 had it read tiles for ever, a huge `/log-key` was read
whole, a NOTICE every few seconds or a trickling answer held `--once` for ever, events nobody
asked for were kept in `pending.jsonl`, and a live flood sat in memory; a first copy stopped
half-way read every tile again."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from factories import claim
from fake_relay import FakeRelay, Lies, serving

from tms.mirror.copy import PENDING, Copy
from tms.mirror.sync import Bounds, Mirror, Target, run_mirror
from tms.mirror.tiles import TILES
from tms.nostr.events import SecretKey

OWNER = SecretKey.generate()
STRANGER = SecretKey.generate()
BOUNDS = Bounds(answer_seconds=2, http_seconds=2, neg_rounds=8, live_bytes=256 * 1024)
ENDS_WITHIN = 30.0  # a generous "it ends at all"


@pytest.fixture
def fake() -> Iterator[FakeRelay]:
    events = [claim(OWNER, "lab", f"honest {i} {os.urandom(4).hex()}") for i in range(20)]
    with serving(FakeRelay(events)) as relay:
        yield relay


def sync(
    fake: FakeRelay, directory: Path, *, once: bool = True, bounds: Bounds = BOUNDS
) -> tuple[int | None, list[str]]:
    """The mirror's exit code (None: still following when stopped) and what it said."""
    said: list[str] = []
    mirror = Mirror(Target.of(fake.url), OWNER, directory, say=said.append, bounds=bounds)

    async def run() -> int | None:
        if once:
            return await asyncio.wait_for(run_mirror(mirror, once=True), ENDS_WITHIN)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run_mirror(mirror, once=False), 4)
        return None

    return asyncio.run(run()), said


def kept(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in ("copy.jsonl", "state.json")}


def lied_to(
    fake: FakeRelay, directory: Path, lie: Callable[[Lies], None]
) -> tuple[int | None, list[str]]:
    """An honest first sync, then the lie: the copy it made must come out unchanged."""
    code, said = sync(fake, directory)
    assert code == 0, said
    before = kept(directory)
    lie(fake.lies)
    code, said = sync(fake, directory)
    assert kept(directory) == before
    return code, said


def test_an_endless_nip77_exchange_is_cut_off(fake: FakeRelay, tmp_path: Path) -> None:
    code, said = lied_to(fake, tmp_path, lambda lies: setattr(lies, "endless_neg", True))
    assert code == 2 and "NIP-77 went on for 8 rounds" in said[-1], said


def test_a_checkpoint_larger_than_what_was_served_is_refused_before_its_tiles(
    fake: FakeRelay, tmp_path: Path
) -> None:
    code, said = lied_to(fake, tmp_path, lambda lies: setattr(lies, "size", 2**40))
    assert code == 1, said
    assert "counts 1,099,511,627,776 log entries" in said[-1], said
    assert fake.tiles_read == [0]  # the honest sync's one tile; none of the lie's


def test_a_huge_log_key_is_not_read_whole(fake: FakeRelay, tmp_path: Path) -> None:
    code, said = lied_to(fake, tmp_path, lambda lies: setattr(lies, "log_key_bytes", 64 << 20))
    assert code == 2 and "went past 4,096 bytes" in said[-1], said


def test_a_notice_every_moment_does_not_hold_it(fake: FakeRelay, tmp_path: Path) -> None:
    code, said = lied_to(fake, tmp_path, lambda lies: setattr(lies, "notices", 0.2))
    assert code == 2 and "answered nothing asked for within 2 s" in said[-1], said


def test_a_trickling_answer_does_not_hold_it(fake: FakeRelay, tmp_path: Path) -> None:
    code, said = lied_to(fake, tmp_path, lambda lies: setattr(lies, "trickle", 0.2))
    assert code == 2 and "no complete answer within 2 s" in said[-1], said


def test_only_asked_for_events_of_this_collection_are_kept(fake: FakeRelay, tmp_path: Path) -> None:
    def lie(lies: Lies) -> None:
        # Sent with every answer though nobody asked: another collection's, and large ones
        lies.unasked = [claim(STRANGER, "other", f"other {i}") for i in range(300)]
        lies.unasked += [claim(STRANGER, "lab", "big " + "x" * 1_000_000) for _ in range(3)]
        # Offered by NIP-77, so asked for, but of another collection
        lies.extra = [claim(STRANGER, "other", "offered")]

    code, said = lied_to(fake, tmp_path, lie)
    assert code == 0, said
    assert not (tmp_path / PENDING).exists()
    code, said = sync(fake, tmp_path)
    assert code == 0 and not (tmp_path / PENDING).exists(), said


def test_a_live_flood_is_held_to_a_bound_and_synced(fake: FakeRelay, tmp_path: Path) -> None:
    flood: list[dict[str, Any]] = [
        claim(STRANGER, "lab", f"flood {i} " + "y" * 2000) for i in range(200)
    ]
    code, said = sync(fake, tmp_path)
    assert code == 0, said
    before = kept(tmp_path)
    fake.lies.live_flood = lambda n: flood[n % len(flood)]
    _, said = sync(fake, tmp_path, once=False)
    # It went on syncing while flooded (the first sync's line, then more), held no more than
    # its bound of live events, and kept none of them: no log covers them.
    assert len([line for line in said if "log entries verified" in line]) >= 2, said
    assert kept(tmp_path) == before
    pending = tmp_path / PENDING
    assert not pending.exists() or pending.stat().st_size <= BOUNDS.live_bytes * 2
    assert len(Copy.open(tmp_path).pending) <= len(flood)


def test_a_first_copy_stopped_half_way_reads_no_full_tile_again(tmp_path: Path) -> None:
    events = [claim(OWNER, "lab", f"many {i}") for i in range(600)]  # tiles 0, 1 and 88 of 2
    with serving(FakeRelay(events, Lies(failing_tiles={2}))) as fake:
        code, said = sync(fake, tmp_path, bounds=replace(BOUNDS, answer_seconds=30))
        assert code == 2 and "answered 503" in said[-1], said
        assert (tmp_path / TILES).exists() and fake.tiles_read == [0, 1, 2]
        fake.lies.failing_tiles = set()
        code, said = sync(fake, tmp_path, bounds=replace(BOUNDS, answer_seconds=30))
        assert code == 0, said
        assert fake.tiles_read == [0, 1, 2, 2]  # the two full ones kept, the last read again
        assert not (tmp_path / TILES).exists()
