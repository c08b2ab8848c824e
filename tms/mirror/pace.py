"""How fast a mirror may ask: a member's own sync is not abuse, so it keeps to the server's rate
limits instead of being exempted from them.

The server counts budgets a mirror spends (`tms.guard.rates`): its address's (every WebSocket
message and HTTP request) and its key's (its reads: REQ, NEG-OPEN, NEG-MSG, COUNT; a server
may count them as `key`, one a message, or as `read`, by what each reads). What each allows is
learnt from what the server says: the NIP-11 document's `limitation.rate_limits` (each budget as
`[{"amount", "seconds"}]` or in `limits`' notation, "40/second;1200/minute", and `read_costs`,
what each read costs), and every refusal, whose words name the budget and the limit ("too many
requests from this address (at most 40 per second); try again in 1 s") and say how long to
wait, as an HTTP 429's `Retry-After` does. Each budget then paces itself as a token bucket a
little under each limit it knows, so that a long first copy runs at the rate the server allows
rather than into its refusals; a refusal waits what it was told and goes on. A server that
states no prices is taken to price as this repository's did before it stated them: a REQ one
address unit and one more for each hundred ids, each read one unit of the key's.

A server that says it is rate-limited for ever is not waited for ever: a told wait counts at most
`LONGEST_WAIT` seconds, and `MAX_REFUSALS` refusals in a row with nothing served between them
end the sync (`Refusing`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tms.errors import TMSError

SHARE: Final = 0.9  # of a limit this side spends: its counter and the server's never quite agree
LONGEST_WAIT: Final = 120.0  # a told wait, at most
MAX_REFUSALS: Final = 30  # rate-limited answers in a row, nothing served between them
UNITS: Final = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
ADDRESS: Final = "address"
KEY: Final = "key"
READ: Final = "read"
_LIMIT: Final = re.compile(r"(\d+)\s*(?:/|per)\s*(?:(\d+)\s*)?(second|minute|hour|day)s?")
_TOLD: Final = re.compile(r"from this (address|key's reads|key)[^(]*\(at most ([^)]*)\)")
_BUDGETS: Final = {"address": ADDRESS, "key": KEY, "key's reads": READ}
_AGAIN: Final = re.compile(r"try again in (\d+(?:\.\d+)?)\s*s")


class Refusing(TMSError):
    """The server refused as rate-limited again and again, with nothing served between."""


def limits_of(text: str) -> list[tuple[int, float]]:
    """`(amount, seconds)` for each limit in `text`: `limits`' notation ("40/second;1200/minute")
    or the refusals' words ("40 per second", "1200 per 2 minutes")."""
    out = []
    for amount, multiple, unit in _LIMIT.findall(text):
        if int(amount) > 0:
            out.append((int(amount), UNITS[unit] * int(multiple or 1)))
    return out


@dataclass
class _Bucket:
    rate: float  # units a second
    capacity: float
    tokens: float
    at: float


@dataclass
class Budget:
    """One of the server's budgets as this side spends it: a bucket per limit it knows."""

    buckets: dict[float, _Bucket] = field(default_factory=dict)  # by the limit's seconds
    held_until: float = 0.0

    def learn(self, amount: int, seconds: float) -> None:
        rate = SHARE * amount / seconds
        capacity = max(1.0, SHARE * min(amount, rate * max(1.0, seconds / 10)))
        known = self.buckets.get(seconds)
        if known is not None and known.rate <= rate:
            return  # what it knew was no looser
        now = time.monotonic()
        self.buckets[seconds] = _Bucket(rate, capacity, 0.0 if known else capacity, now)

    def hold(self, seconds: float) -> None:
        self.held_until = max(self.held_until, time.monotonic() + min(seconds, LONGEST_WAIT))
        for bucket in self.buckets.values():
            bucket.tokens = 0.0  # the server's count is full: spend none of what this side kept

    def wait_for(self, cost: float) -> float:
        """Seconds until `cost` may be spent (0: now)."""
        now = time.monotonic()
        wait = max(0.0, self.held_until - now)
        for bucket in self.buckets.values():
            tokens = min(bucket.capacity, bucket.tokens + (now - bucket.at) * bucket.rate)
            need = min(cost, bucket.capacity)
            if tokens < need:
                wait = max(wait, (need - tokens) / bucket.rate)
        return wait

    def spend(self, cost: float) -> None:
        now = time.monotonic()
        for bucket in self.buckets.values():
            tokens = min(bucket.capacity, bucket.tokens + (now - bucket.at) * bucket.rate)
            bucket.tokens = tokens - min(cost, bucket.capacity)
            bucket.at = now


@dataclass(frozen=True, slots=True)
class Prices:
    """What the server says a read costs of the key's `read` budget (NIP-11's
    `rate_limits.read_costs`); None: it says nothing, and prices as before (`Pace`)."""

    ids_per_unit: int = 100
    neg_items_per_unit: int = 1000
    neg_msg_bytes_per_unit: int = 4096

    @classmethod
    def of(cls, stated: object) -> Prices | None:
        if not isinstance(stated, dict):
            return None
        known = {
            name: value
            for name in ("ids_per_unit", "neg_items_per_unit", "neg_msg_bytes_per_unit")
            if isinstance(value := stated.get(name), int) and value > 0
        }
        return cls(**known)


@dataclass
class Pace:
    """The mirror's budgets on one server, what its reads cost, and the refusals it met in a
    row."""

    budgets: dict[str, Budget] = field(
        default_factory=lambda: {ADDRESS: Budget(), KEY: Budget(), READ: Budget()}
    )
    prices: Prices | None = None
    ids_per_filter: int | None = None  # NIP-11's `max_ids_per_filter`, when stated
    refusals: int = 0

    @classmethod
    def of(cls, info: Mapping[str, object]) -> Pace:
        """From a NIP-11 document: the limits and prices its `limitation` states, if any."""
        pace = cls()
        limitation = info.get("limitation")
        if not isinstance(limitation, dict):
            return pace
        ids = limitation.get("max_ids_per_filter")
        if isinstance(ids, int) and ids > 0:
            pace.ids_per_filter = ids
        stated = limitation.get("rate_limits")
        if not isinstance(stated, dict):
            return pace
        pace.prices = Prices.of(stated.get("read_costs"))
        for name, limits in stated.items():
            if name in pace.budgets:
                for amount, seconds in _windows(limits):
                    pace.budgets[name].learn(amount, seconds)
        return pace

    def costs(self, message: list[Any]) -> dict[str, float]:
        """What sending `message` spends of each budget, as the server prices it."""
        kind = message[0]
        filters = [f for f in message[2:] if isinstance(f, dict)] if kind == "REQ" else []
        ids = [len(f.get("ids", ())) for f in filters]
        if self.prices is None:  # as priced before NIP-11 stated it
            read = 1 if kind in ("REQ", "COUNT", "NEG-OPEN", "NEG-MSG", "EVENT") else 0
            return {ADDRESS: 1 + sum(n // 100 for n in ids), KEY: read, READ: 0}
        read = 0
        if kind == "REQ":
            read = sum(max(1, -(-n // self.prices.ids_per_unit)) for n in ids)
        elif kind == "NEG-OPEN":
            read = 1
        elif kind == "NEG-MSG" and len(message) > 2:
            read = 1 + len(str(message[2])) // 2 // self.prices.neg_msg_bytes_per_unit
        return {ADDRESS: 1, KEY: 1 if kind == "EVENT" else 0, READ: read}

    async def take(
        self,
        costs: Mapping[str, float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Wait (with `sleep`: a relay's connection reads meanwhile) until the server's budgets
        allow `costs` (one address unit when not given), then count them spent."""
        spent = {name: cost for name, cost in (costs or {ADDRESS: 1}).items() if cost}
        while True:
            wait = max(self.budgets[name].wait_for(cost) for name, cost in spent.items())
            if wait <= 0:
                break
            await sleep(wait)
        for name, cost in spent.items():
            self.budgets[name].spend(cost)

    def refused(self, words: str, retry_after: str | None = None) -> float:
        """A rate-limited answer: learn the limit its words name, hold the budget for the wait
        it was told (or a second), and count it; returns the seconds to wait. Raises `Refusing`
        once refusals came `MAX_REFUSALS` times in a row."""
        self.refusals += 1
        if self.refusals > MAX_REFUSALS:
            raise Refusing(
                f"the server refused {MAX_REFUSALS} times in a row as rate-limited, with nothing "
                f"served between: {words[:200]}"
            )
        told = _TOLD.search(words)
        name = _BUDGETS[told.group(1)] if told else ADDRESS
        for amount, seconds in limits_of(told.group(2)) if told else []:
            self.budgets[name].learn(amount, seconds)
        again = _AGAIN.search(words)
        wait = 1.0
        if retry_after is not None and retry_after.strip().isdigit():
            wait = float(retry_after.strip())
        elif again is not None:
            wait = float(again.group(1))
        wait = min(max(wait, 0.5), LONGEST_WAIT)
        self.budgets[name].hold(wait)
        return wait

    def served(self) -> None:
        """Something was answered: the refusals in a row start again from none."""
        self.refusals = 0


def _windows(stated: object) -> list[tuple[int, float]]:
    """A budget's limits as NIP-11 states them: `[{"amount", "seconds"}]`, or a string in
    `limits`' notation."""
    if isinstance(stated, str):
        return limits_of(stated)
    out: list[tuple[int, float]] = []
    for window in stated if isinstance(stated, list) else []:
        if isinstance(window, dict):
            amount, seconds = window.get("amount"), window.get("seconds")
            if not isinstance(amount, int) or not isinstance(seconds, int | float):
                continue
            if amount > 0 and seconds > 0:
                out.append((amount, float(seconds)))
    return out


def is_rate_limited(words: object) -> bool:
    return isinstance(words, str) and words.startswith("rate-limited:")
