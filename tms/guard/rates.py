"""Rate limits, kept by the `limits` library (sliding-window counters in this process's memory).

Five budgets, each a list of limits in `limits`' notation ("10/second;300/minute"), or off:

- `address`: every request from one client address, counted before anything is parsed or any
  signature verified, so a flood of forged events costs little (an IPv6 client counts by its /64,
  which one machine usually holds whole);
- `key`: every signed tool call and every publish by one key, counted only once its signature
  has verified, so that nobody can spend another key's budget with events they forged;
- `fetch`: `fetch_url` and the page's Fetch, by one key (downloads and extraction are dear);
- `login`: browser logins, by one key;
- `read`: what one key's relay reads cost (REQ, COUNT, NEG-OPEN, NEG-MSG), in units of what
  reading one page of a stored answer (`PAGE_ROWS` rows) costs, counted once AUTH names the key,
  whatever address each message comes from: one key on twenty addresses spends one budget.

A relay message spends one unit of its address's budget (counted before it is parsed), and a
read then spends the key's `read` budget by what it reads, not by the message: a REQ or COUNT
(`read_cost`) one unit a filter (a COUNT's, which reads every match rather than a page,
`COUNT_UNITS`), one more for each `READ_VALUES_PER_UNIT` authors, kinds or tag values it names,
and, for a filter of ids, one unit a page of them (an id is one probe of its index and at most one
row: a member fetching what NIP-77 said it lacks pays for the rows, not for the messages); a
NEG-OPEN by the items its list holds (`neg_open_cost`: building and sealing a list costs about
what reading `NEG_ITEMS_PER_UNIT` events' rows would), a NEG-MSG by its bytes, which is what its
ranges cost to answer (`neg_msg_cost`). An everyday one-filter REQ costs one unit. A call never
costs more than a limit's whole amount, so a large read is slowed to the rate the budget allows,
never refused for good. A witness's `add-checkpoint`, which anyone may post and which costs a
signature verification and a database read, spends `ADD_CHECKPOINT_UNITS` of the address budget.
The relay's NIP-11 document states the rates and the prices
(`tms.relay.info`), so a client paces itself.

The counts live in the server process, or, under `tms serve --workers N`, in the table its
processes share (`tms.guard.shared`): a client gets one budget however many processes serve it.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from tms.errors import ConfigError, RateLimited, Refusal
from tms.metrics import RATE_LIMITED
from tms.nostr.filters import Filter

OFF: Final = "off"
DEFAULT_ADDRESS: Final = "40/second;1200/minute"
DEFAULT_KEY: Final = "20/second;600/minute"
DEFAULT_FETCH: Final = "10/minute;100/hour"
DEFAULT_LOGIN: Final = "5/minute;30/hour"
# A unit is one page of a stored answer (100 rows): a key reads at most 300,000 rows a minute,
# in bursts of 20,000 a second. A member's sync of 100,000 events (one NEG-OPEN of 101 units,
# then 1,000 pages of ids) spends about 1,100: within half a minute, and its NEG-OPEN leaves
# room in its second for the messages after it. One key building lists of 60,000 events
# (61 units each) builds at most 49 a minute, from however many addresses.
DEFAULT_READ: Final = "200/second;3000/minute"
IPV6_PREFIX: Final = 64
PAGE_ROWS: Final = 100  # rows of a stored answer's page: what one unit reads
READ_VALUES_PER_UNIT: Final = 100  # a filter's authors, kinds and tag values per extra unit
COUNT_UNITS: Final = 5  # a COUNT filter's units: it reads every match, a REQ page at most 100
# A witness's add-checkpoint (tms.witness.routes), unauthenticated: a signature verification per
# trusted key, a database read, and when it advances a write and a cosignature.
ADD_CHECKPOINT_UNITS: Final = 5
NEG_ITEMS_PER_UNIT: Final = 1000  # a NEG-OPEN's list: items built and sealed per unit
NEG_BYTES_PER_UNIT: Final = 4096  # a NEG-MSG: bytes (about 100 ranges) answered per unit


def read_cost(filters: Sequence[Filter], *, count: bool = False) -> int:
    """What a REQ (or, `count`, a COUNT) of these filters spends: its filters, and the values
    they name, which is what its reads cost the database (an index walk per author or kind);
    a filter of ids, its pages of ids (a probe of the ids' index each, at most a row)."""
    per_filter = COUNT_UNITS if count else 1
    cost = 0
    for wanted in filters:
        values = sum(len(v) for v in (wanted.authors, wanted.kinds) if v is not None)
        values += sum(len(v) for v in wanted.tags.values())
        ids = 0 if wanted.ids is None else len(wanted.ids)
        cost += max(per_filter, -(-ids // PAGE_ROWS)) + values // READ_VALUES_PER_UNIT
    return max(1, cost)


def neg_open_cost(items: int) -> int:
    """What a NEG-OPEN spends: its list of `items` (as many as the filter can match, at most),
    built, sealed and held."""
    return 1 + max(0, items) // NEG_ITEMS_PER_UNIT


def neg_msg_cost(size: int) -> int:
    """What a NEG-MSG of `size` bytes (before hex) spends: its ranges, each a fingerprint or a
    list of ids the relay computes or compares."""
    return 1 + max(0, size) // NEG_BYTES_PER_UNIT


def parse_rates(name: str, text: str) -> tuple[RateLimitItem, ...]:
    """A setting's limits: `limits`' notation, or "off" (no limit); else a `ConfigError`."""
    text = text.strip()
    if text.lower() == OFF:
        return ()
    try:
        return tuple(parse_many(text))
    except ValueError:
        raise ConfigError(
            f"{name} must be rate limits such as '10/second;300/minute', or 'off'; got {text!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The `TMS_RATE_*` settings, parsed."""

    address: tuple[RateLimitItem, ...] = ()
    key: tuple[RateLimitItem, ...] = ()
    fetch: tuple[RateLimitItem, ...] = ()
    login: tuple[RateLimitItem, ...] = ()
    read: tuple[RateLimitItem, ...] = ()

    @classmethod
    def defaults(cls) -> RateLimits:
        return cls(
            address=parse_rates("TMS_RATE_ADDRESS", DEFAULT_ADDRESS),
            key=parse_rates("TMS_RATE_KEY", DEFAULT_KEY),
            fetch=parse_rates("TMS_RATE_FETCH", DEFAULT_FETCH),
            login=parse_rates("TMS_RATE_LOGIN", DEFAULT_LOGIN),
            read=parse_rates("TMS_RATE_READ", DEFAULT_READ),
        )


class Throttle:
    """The budgets of one server (its processes', given their shared `storage`). Each check
    either passes (and counts) or raises `RateLimited` with the seconds until the call would
    pass; a refused call is not counted (but a call refused on a later limit because another
    worker's hit won the race has spent its earlier limits: `limits` takes no hit back, and
    the error is one call too few, never one too many)."""

    def __init__(self, limits: RateLimits | None = None, storage: Storage | None = None) -> None:
        self.limits = limits or RateLimits()
        self._limiter = SlidingWindowCounterRateLimiter(storage or MemoryStorage())

    async def address(self, address: str | None, cost: int = 1) -> None:
        """`cost`: units this request spends (a relay read's `read_cost`)."""
        if address is not None and self.limits.address:
            await self._spend(
                "address", self.limits.address, budget_of(address), "this address", cost=cost
            )

    async def key(self, pubkey: str) -> None:
        if self.limits.key:
            await self._spend("key", self.limits.key, pubkey, "this key", pubkey)

    async def keys(self, pubkeys: Sequence[str]) -> None:
        """One call for each key in turn (a batch signed by several keys costs each of them)."""
        for pubkey in dict.fromkeys(pubkeys):
            await self.key(pubkey)

    async def read(self, pubkey: str, cost: int = 1) -> None:
        """`cost`: units a relay read spends (`read_cost`, `neg_open_cost`, `neg_msg_cost`)."""
        if self.limits.read:
            await self._spend(
                "read", self.limits.read, pubkey, "this key's reads", pubkey, cost=cost
            )

    async def fetch(self, pubkey: str) -> None:
        await self._spend("fetch", self.limits.fetch, pubkey, "this key's fetches", pubkey)

    async def login(self, pubkey: str) -> None:
        await self._spend("login", self.limits.login, pubkey, "this key's logins", pubkey)

    async def _spend(
        self,
        budget: str,
        items: tuple[RateLimitItem, ...],
        who: str,
        whose: str,
        pubkey: str | None = None,
        *,
        cost: int = 1,
    ) -> None:
        # Never more than a limit's whole amount: dearer calls wait longer, none waits forever.
        costs = [max(1, min(cost, item.amount)) for item in items]
        for item, spent in zip(items, costs, strict=True):
            if not await self._limiter.test(item, budget, who, cost=spent):
                await self._refuse(budget, item, who, whose, pubkey)
        for item, spent in zip(items, costs, strict=True):
            # A hit that lost a race to another worker's (they tested at once and the budget
            # had room for one) is refused too: `hit` reverts it and says so.
            if not await self._limiter.hit(item, budget, who, cost=spent):
                await self._refuse(budget, item, who, whose, pubkey)

    async def _refuse(
        self, budget: str, item: RateLimitItem, who: str, whose: str, pubkey: str | None
    ) -> NoReturn:
        stats = await self._limiter.get_window_stats(item, budget, who)
        retry = max(1, math.ceil(stats.reset_time - time.time()))
        RATE_LIMITED.labels(budget).inc()
        raise RateLimited(
            f"rate limited: too many requests from {whose} (at most {_per(item)}); "
            f"try again in {retry} s",
            retry_after=retry,
        ).refused_as(Refusal.RATE_LIMITED, pubkey)


@functools.lru_cache(maxsize=4096)  # parsing an address costs a few us, on every relay message
def budget_of(address: str) -> str:
    """Whose budget a client address spends: itself, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address  # not an IP (a Unix socket, a test client): counted as it is
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)


def seconds_of(item: RateLimitItem) -> int:
    """The window of a limit, in seconds."""
    return int(item.get_expiry())


def _per(item: RateLimitItem) -> str:
    unit = item.GRANULARITY.name
    if item.multiples == 1:
        return f"{item.amount} per {unit}"
    return f"{item.amount} per {item.multiples} {unit}s"
