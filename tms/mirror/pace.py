"""How fast a mirror may ask: a member's own sync is not abuse, so it keeps to the server's rate
limits instead of being exempted from them.

The server counts two budgets a mirror spends (`tms.guard.rates`): its address's (every
WebSocket message and HTTP request, a REQ by the ids it names) and its key's (every read: REQ,
NEG-OPEN, NEG-MSG, COUNT, and each EVENT). What each allows is learnt from what the server says:
the NIP-11 document's `limitation` (`rate_limits`: `{"address": "40/second;1200/minute", "key":
...}`, when it states them), and every refusal, whose words name the budget and the limit ("too
many requests from this address (at most 40 per second); try again in 1 s") and say how long to
wait, as an HTTP 429's `Retry-After` does. Each budget then paces itself as a token bucket a
little under each limit it knows, so that a long first copy runs at the rate the server allows
rather than into its refusals; a refusal waits what it was told and goes on.

A server that says it is rate-limited for ever is not waited for ever: a told wait counts at most
`LONGEST_WAIT` seconds, and `MAX_REFUSALS` refusals in a row with nothing served between them
end the sync (`Refusing`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tms.errors import TMSError

SHARE: Final = 0.9  # of a limit this side spends: its counter and the server's never quite agree
LONGEST_WAIT: Final = 120.0  # a told wait, at most
MAX_REFUSALS: Final = 30  # rate-limited answers in a row, nothing served between them
UNITS: Final = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
ADDRESS: Final = "address"
KEY: Final = "key"
_LIMIT: Final = re.compile(r"(\d+)\s*(?:/|per)\s*(?:(\d+)\s*)?(second|minute|hour|day)s?")
_TOLD: Final = re.compile(r"from this (address|key)[^(]*\(at most ([^)]*)\)")
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


@dataclass
class Pace:
    """The mirror's two budgets on one server, and the refusals it met in a row."""

    budgets: dict[str, Budget] = field(default_factory=lambda: {ADDRESS: Budget(), KEY: Budget()})
    refusals: int = 0

    @classmethod
    def of(cls, info: Mapping[str, object]) -> Pace:
        """From a NIP-11 document: the limits its `limitation` states, if any."""
        pace = cls()
        limitation = info.get("limitation")
        stated = limitation.get("rate_limits") if isinstance(limitation, dict) else None
        if isinstance(stated, dict):
            for name, text in stated.items():
                if name in pace.budgets and isinstance(text, str):
                    for amount, seconds in limits_of(text):
                        pace.budgets[name].learn(amount, seconds)
        return pace

    async def take(self, address: float = 1, key: float = 0) -> None:
        """Wait until the server's budgets allow this much, then count it spent."""
        while True:
            wait = self.budgets[ADDRESS].wait_for(address)
            if key:
                wait = max(wait, self.budgets[KEY].wait_for(key))
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        self.budgets[ADDRESS].spend(address)
        if key:
            self.budgets[KEY].spend(key)

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
        name = told.group(1) if told else ADDRESS
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


def is_rate_limited(words: object) -> bool:
    return isinstance(words, str) and words.startswith("rate-limited:")
