"""Which addresses and ports the fetcher may reach: a pure policy, no I/O.

The fetcher resolves a URL's host itself and asks `classify` about every address it gets back;
one non-public address refuses the whole host. The rules, most specific first:

IPv4 is public unless it falls in one of the IANA special-purpose blocks below (`_V4_RULES`):
"this network" 0.0.0.0/8, private 10/8, 172.16/12 and 192.168/16, shared (CGNAT) 100.64/10,
loopback 127/8, link-local 169.254/16 (cloud metadata services live there), the IETF protocol
block 192.0.0.0/24, the documentation nets, benchmarking 198.18/15, the deprecated 6to4 relay
anycast 192.88.99/24, multicast 224/4, reserved 240/4 and broadcast.

IPv6 is refused by default: only global unicast (2000::/3) is public, minus its special blocks
(IETF protocol assignments 2001::/23 with Teredo 2001::/32 inside it, documentation 2001:db8::/32
and 3fff::/20, 6to4 2002::/16). Outside 2000::/3 a refusal names the block when it has a name
(loopback, unspecified, IPv4-mapped, IPv4-compatible, NAT64 local-use, discard-only, unique-local,
link-local, site-local, multicast) and says "reserved" otherwise. The one exception is the NAT64
well-known prefix 64:ff9b::/96, which DNS64 resolvers on IPv6-only networks hand out for IPv4-only
sites: it is judged by the IPv4 address it embeds. Transition addresses that carry an IPv4 address
(IPv4-mapped, IPv4-compatible, 6to4, Teredo) are refused whatever they embed: no web server
needs them, and a check of the embedded address could only ever be a way around the IPv4 rules.

Compared with Python's `ipaddress` (`is_global`), this policy is never more permissive: where
they differ it refuses more (multicast, site-local, all of 192.0.0.0/24, 192.88.99.0/24,
2001::/23, 2002::/16, 3fff::/20, and NAT64 addresses embedding a non-public IPv4 address).
`tests/fetch/test_addresses.py` checks that against `ipaddress` over random addresses.

Ports: any port from 1 to 65535 except the "bad ports" the Fetch standard makes browsers refuse
(SMTP, IRC, SSH and the like), so a URL cannot make us talk HTTP to a mail or chat server.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Final

from tms.errors import FetchError

IPAddress = IPv4Address | IPv6Address

_V4_RULES: Final[tuple[tuple[IPv4Network, str], ...]] = tuple(
    (IPv4Network(net), label)
    for net, label in (
        ("255.255.255.255/32", "broadcast"),
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"),  # deprecated 6to4 relay anycast
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)

NAT64: Final = IPv6Network("64:ff9b::/96")
_GLOBAL_UNICAST: Final = IPv6Network("2000::/3")

_V6_RULES: Final[tuple[tuple[IPv6Network, str], ...]] = tuple(
    (IPv6Network(net), label)
    for net, label in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::/96", "IPv4-compatible"),
        ("64:ff9b:1::/48", "NAT64 local-use"),
        ("100::/64", "discard-only"),
        ("2001::/32", "Teredo"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "reserved"),  # IETF protocol assignments
        ("2002::/16", "6to4"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

# The Fetch standard's "bad ports" (https://fetch.spec.whatwg.org/#port-blocking).
BLOCKED_PORTS: Final = frozenset(
    {1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95}
    | {101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161}
    | {179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563}
    | {587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060}
    | {5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080}
)


def classify(ip: IPAddress) -> str | None:
    """None for a public address, else why not: "loopback", "private", "IPv4-mapped", ..."""
    if isinstance(ip, IPv4Address):
        return next((label for net, label in _V4_RULES if ip in net), None)
    if ip.scope_id is not None:  # fe80::1%eth0: compare the address alone
        ip = IPv6Address(int(ip))
    if ip in NAT64:
        inner = classify(IPv4Address(int(ip) & 0xFFFF_FFFF))
        return None if inner is None else f"NAT64-embedded {inner}"
    label = next((label for net, label in _V6_RULES if ip in net), None)
    if label is None and ip not in _GLOBAL_UNICAST:
        return "reserved"
    return label


def describe(label: str) -> str:
    """`classify`'s label as a noun phrase: "a private address", "an IPv4-mapped address"."""
    article = "an" if label[0] in "aeioAEIO" or label.startswith("unspecified") else "a"
    return f"{article} {label} address"


def port_refusal(port: int) -> str | None:
    """None when `port` may be fetched, else a one-line reason."""
    if not 0 < port < 65536:
        return f"port {port} is not a TCP port"
    if port in BLOCKED_PORTS:
        return f"port {port} is not for the web (browsers block it too)"
    return None


def normalize_host(host: str) -> str:
    """The form a host takes in comparisons: lowercase, IPv6 without brackets, canonical IPs."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ip_address(host))
    except ValueError:
        return host.rstrip(".")


def parse_exemptions(value: str) -> frozenset[tuple[str, int]]:
    """Parse TMS_FETCH_ALLOW: comma-separated `host:port` pairs (IPv6 as `[::1]:8080`).

    For tests only: each pair lifts the address policy for exactly that host and port, as the
    host is written in the URL. Empty means none. Anything malformed raises FetchError.
    """
    pairs: set[tuple[str, int]] = set()
    if not value.strip():
        return frozenset()
    for item in value.split(","):
        entry = item.strip()
        host, sep, port_text = entry.rpartition(":")
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if (
            not sep
            or not bare
            or ("[" in bare or "]" in bare)
            or (":" in bare and not host.startswith("["))
            or not port_text.isascii()
            or not port_text.isdigit()
            or not 0 < int(port_text) < 65536
        ):
            raise FetchError(
                f"TMS_FETCH_ALLOW: {entry!r} is not a host:port pair (IPv6 as [::1]:8080)"
            )
        pairs.add((normalize_host(host), int(port_text)))
    return frozenset(pairs)
