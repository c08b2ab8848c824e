"""An independent reading of RFC 6962 section 2.1 and RFC 9162 section 2.1, for the tests: the
Merkle Tree Hash, audit paths and consistency proofs by their recursive definitions, and the
RFC 9162 verification algorithms step by step. Written from the RFCs' text, sharing nothing
with `tms.tlog`, so that a misreading there cannot hide behind the same misreading here.

Slow on purpose (the definitions recurse over the leaves): for the sizes tests use."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def leaf(entry: bytes) -> bytes:
    return sha256(b"\x00" + entry)


def node(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def k_for(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(entries: Sequence[bytes]) -> bytes:
    """RFC 6962 2.1: MTH(D[n]) over the entries themselves."""
    n = len(entries)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaf(entries[0])
    k = k_for(n)
    return node(mth(entries[:k]), mth(entries[k:]))


def path(m: int, entries: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 2.1.1: PATH(m, D[n])."""
    n = len(entries)
    if n == 1:
        return []
    k = k_for(n)
    if m < k:
        return [*path(m, entries[:k]), mth(entries[k:])]
    return [*path(m - k, entries[k:]), mth(entries[:k])]


def proof(m: int, entries: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 2.1.2: PROOF(m, D[n]) = SUBPROOF(m, D[n], true)."""
    return subproof(m, entries, True)


def subproof(m: int, entries: Sequence[bytes], b: bool) -> list[bytes]:
    n = len(entries)
    if m == n:
        return [] if b else [mth(entries)]
    k = k_for(n)
    if m <= k:
        return [*subproof(m, entries[:k], b), mth(entries[k:])]
    return [*subproof(m - k, entries[k:], False), mth(entries[:k])]


def verify_inclusion(
    leaf_index: int, tree_size: int, leaf_hash: bytes, inclusion_path: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 2.1.3.2."""
    if leaf_index >= tree_size:
        return False
    fn, sn = leaf_index, tree_size - 1
    r = leaf_hash
    for p in inclusion_path:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node(p, r)
            while fn % 2 == 0 and fn != 0:
                fn //= 2
                sn //= 2
        else:
            r = node(r, p)
        fn //= 2
        sn //= 2
    return sn == 0 and r == root


def verify_consistency(
    first: int, second: int, first_hash: bytes, second_hash: bytes, path_: Sequence[bytes]
) -> bool:
    """RFC 9162 2.1.4.2 (for 0 < first < second; the equal sizes are compared directly)."""
    if first == second:
        return not path_ and first_hash == second_hash
    if not 0 < first < second or not path_:
        return False
    consistency_path = list(path_)
    if first & (first - 1) == 0:
        consistency_path = [first_hash, *consistency_path]
    fn, sn = first - 1, second - 1
    while fn % 2 == 1:
        fn //= 2
        sn //= 2
    fr = sr = consistency_path[0]
    for c in consistency_path[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr = node(c, fr)
            sr = node(c, sr)
            while fn % 2 == 0 and fn != 0:
                fn //= 2
                sn //= 2
        else:
            sr = node(sr, c)
        fn //= 2
        sn //= 2
    return fr == first_hash and sr == second_hash and sn == 0


# The Certificate Transparency test vectors (certificate-transparency's merkle tests, reused by
# every RFC 6962 implementation): eight entries, the roots of their prefixes, and proofs.
CT_ENTRIES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (leaf index, tree size, path)
CT_INCLUSION = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
# (old size, new size, proof)
CT_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
