"""The client addresses the operator blocked (NIP-86 `blockip` on `/`), as every request and
relay connection meets them at the gate: an in-memory copy of the database's list
(`tms.ledger.operated`), replaced whole when it is read again, so a look-up never waits on the
database. Pure: addresses in, answers out."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from tms.guard.clients import Network


def parse_address(text: str) -> Network:
    """An address or a network (`203.0.113.7`, `2001:db8::/32`), or `ValueError`."""
    return ipaddress.ip_network(text.strip(), strict=False)


class Blocklist:
    def __init__(self) -> None:
        self._networks: tuple[Network, ...] = ()
        self.details: dict[str, str] = {}  # the root relay's NIP-11 name and description

    def replace(self, addresses: Iterable[str]) -> None:
        networks = []
        for text in addresses:
            try:
                networks.append(parse_address(text))
            except ValueError:
                continue  # stored by an older rule: it blocks nothing rather than everything
        self._networks = tuple(networks)

    def holds(self, address: str | None) -> bool:
        if not self._networks or address is None:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip.version == net.version and ip in net for net in self._networks)
