"""Connections grouped by whom they count as, so that at a connection cap the crowd gives way.

A connection counts as its client address (an IPv6 one by its /64), and a WebSocket connection
also as the key it authenticated as, once the app says which (`tms.http.websocket`). Its weight
is the larger of the two groups' sizes. At a cap the victim is one of the heaviest connections
(`tms.http.protocol.Connections.victim`): 1,000 sockets of one key from 1,000 addresses weigh
1,000 each, where a member's one socket weighs 1, so the crowd pays however it spreads over
addresses. The sizes are kept in buckets, so the heaviest weight is known at once rather than
counted over every connection at each arrival: a flood of arrivals at the cap would otherwise
cost a pass over 10,000 connections each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

Group = tuple[str, str]  # ("address", "127.0.0.2") or ("key", "<hex pubkey>")
FEW_GROUPS: Final = 64  # at most this many heaviest groups: their oldest found through them


class Member(Protocol):
    address: str | None  # None: not counted by address (a trusted proxy's)
    key: str | None  # the key a WebSocket connection authenticated as; None: none (yet)
    opened: float  # `time.monotonic()` when it opened


class Crowds:
    """One pool of connections (the HTTP ones, or the WebSocket ones), by address and by key."""

    def __init__(self) -> None:
        self.members: dict[Member, None] = {}  # oldest first
        self.groups: dict[Group, dict[Member, None]] = {}  # each oldest first
        self.sizes: dict[int, dict[Group, None]] = {}  # groups by their size
        self.top = 0  # the size of the largest group

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, member: object) -> bool:
        return member in self.members

    def add(self, member: Member) -> None:
        if member in self.members:
            return
        self.members[member] = None
        for group in groups_of(member):
            self._join(group, member)

    def remove(self, member: Member) -> None:
        if self.members.pop(member, False) is not False:
            for group in groups_of(member):
                self._leave(group, member)

    def set_key(self, member: Member, key: str | None) -> None:
        """`member` authenticated as `key` (or as another key than before)."""
        if key == member.key:
            return
        counted = member in self.members
        if counted and member.key is not None:
            self._leave(("key", member.key), member)
        member.key = key
        if counted and key is not None:
            self._join(("key", key), member)

    def size(self, group: Group) -> int:
        return len(self.groups.get(group, ()))

    def weight(self, member: Member) -> int:
        return max((self.size(group) for group in groups_of(member)), default=0)

    def heaviest(self) -> Iterator[Member]:
        """The members of the largest groups, oldest first where that is cheap: the first of
        each such group when they are few, else every member in order (the largest weigh
        `top`: when every group holds one connection, the first member is the oldest)."""
        if self.top == 0:
            return iter(())
        bucket = self.sizes.get(self.top, {})
        if len(bucket) <= FEW_GROUPS:
            firsts = [next(iter(self.groups[group])) for group in bucket]
            return iter(sorted(firsts, key=lambda member: member.opened))
        return (member for member in self.members if self.weight(member) == self.top)

    def _join(self, group: Group, member: Member) -> None:
        mine = self.groups.setdefault(group, {})
        before = len(mine)
        mine[member] = None
        self._moved(group, before, before + 1)

    def _leave(self, group: Group, member: Member) -> None:
        mine = self.groups.get(group)
        if mine is None or mine.pop(member, False) is False:
            return  # not a member of it
        after = len(mine)
        if not after:
            del self.groups[group]
        self._moved(group, after + 1, after)

    def _moved(self, group: Group, before: int, after: int) -> None:
        if before:
            bucket = self.sizes[before]
            del bucket[group]
            if not bucket:
                del self.sizes[before]
        if after:
            self.sizes.setdefault(after, {})[group] = None
        if after > self.top:
            self.top = after
        elif before == self.top and before not in self.sizes:
            self.top = after  # it was the last group that large: it is the largest, one smaller


def groups_of(member: Member) -> Iterator[Group]:
    if member.address is not None:
        yield ("address", member.address)
    if member.key is not None:
        yield ("key", member.key)
