"""Who is asking: the client's address, read from `X-Forwarded-For` only through trusted proxies.

A client can write any `X-Forwarded-For` it likes, so the header counts only when the peer that
sent the request is one of `TMS_TRUSTED_PROXIES`; then the addresses it lists are read from the
right (the hop nearest to us) and the first that is not a trusted proxy is the client. A proxy
that appends the address it saw (nginx's `$proxy_add_x_forwarded_for`) thus gives the true
client even when the client sent a forged header of its own. With no trusted proxies, the peer
is the client, whatever the headers say.

The address of the request being served is kept in a context variable for the refusal log, so
that what records a refusal deep in a tool does not have to carry it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Final

from tms.errors import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CURRENT: Final[ContextVar[str | None]] = ContextVar("tms_client_address", default=None)


def parse_networks(name: str, text: str) -> tuple[Network, ...]:
    """Comma-separated addresses or CIDR networks (`10.0.0.0/8, ::1`); else a `ConfigError`."""
    networks = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(
                f"{name} must be comma-separated IP addresses or networks (10.0.0.0/8), "
                f"got {item[:100]!r}"
            ) from None
    return tuple(networks)


def client_address(
    peer: str | None, forwarded_for: Iterable[str], trusted: Sequence[Network]
) -> str | None:
    """The client's address: `peer` (who connected), or, when `peer` is a trusted proxy, the
    nearest untrusted address its `X-Forwarded-For` headers name (the headers' values in the
    order they came)."""
    if peer is None or not trusted or not is_trusted(peer, trusted):
        return peer
    hops = [hop.strip() for value in forwarded_for for hop in value.split(",")]
    client = peer
    for hop in reversed([hop for hop in hops if hop]):
        address = _address(hop)
        if address is None:
            break  # garbage: the nearest address we could read stands
        client = address
        if not is_trusted(address, trusted):
            break
    return client


def _address(text: str) -> str | None:
    """An address as a proxy may write it (`[2001:db8::1]:443` and `192.0.2.1:80` included)."""
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def is_trusted(address: str, trusted: Sequence[Network]) -> bool:
    """Whether `address` is in one of the `trusted` networks (an IPv4-mapped IPv6 address as
    its IPv4 one); anything that is not an IP address is not."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in trusted)
