"""Merkle trees as RFC 6962 defines them (and RFC 9162 section 2 restates): the hashes, the
shapes of inclusion and consistency proofs, the append-only "compact range" a log extends, and
the two verification algorithms.

A log never holds its whole tree in memory. What it stores, and what every function here speaks
of, are *perfect subtrees*: a `Node` `(level, index)` is the subtree of the `2**level` leaves
`[index * 2**level, (index + 1) * 2**level)`. Once its last leaf is appended, such a node's hash
never changes, so it can be written once to an append-only table. Every hash a proof needs is a
perfect subtree or, on the tree's right edge, a few of them folded together (`range_hash`).

Pure: no I/O, no database. Sizes and indexes are Python ints; the database keeps them in
`bigint`, so trees stay below 2**63 leaves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

HASH_SIZE: Final = 32
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()  # MTH({}): the root of the empty tree
_LEAF: Final = b"\x00"
_NODE: Final = b"\x01"

Node = tuple[int, int]  # (level, index): the perfect subtree of 2**level leaves at index
Range = tuple[int, int]  # [start, end): the leaves whose Merkle Tree Hash a proof carries


def leaf_hash(entry: bytes) -> bytes:
    """RFC 6962 2.1: MTH({d}) = SHA-256(0x00 || d)."""
    return hashlib.sha256(_LEAF + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 2.1: SHA-256(0x01 || MTH(left) || MTH(right))."""
    return hashlib.sha256(_NODE + left + right).digest()


def _split(n: int) -> int:
    """RFC 6962's k: the largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


# --- the tree's shape ------------------------------------------------------------------------


def perfect_nodes(start: int, end: int) -> list[Node]:
    """`[start, end)` as the perfect subtrees it is made of, left to right, largest first. For
    the ranges proofs carry (and for `[0, size)`, the frontier), that is how RFC 6962 splits
    them: their Merkle Tree Hash folds these from the right (`range_hash`)."""
    nodes = []
    while start < end:
        level = (end - start).bit_length() - 1
        if start:
            level = min(level, (start & -start).bit_length() - 1)  # aligned on its own size
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def frontier(size: int) -> list[Node]:
    """The perfect subtrees a tree of `size` leaves is made of (one per bit of `size`): all a
    log needs to append to it and compute its root."""
    return perfect_nodes(0, size)


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """RFC 9162 2.1.3.1 PATH(index, D[0:size]): the ranges whose hashes make the audit path
    of leaf `index`, from the leaf up."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    path: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start += k
    path.reverse()
    return path


def consistency_ranges(old: int, new: int) -> list[Range]:
    """RFC 9162 2.1.4.1 PROOF(old, D[0:new]): the ranges whose hashes prove that the tree of
    `old` leaves is a prefix of the tree of `new`. Empty when `old` is 0 or equals `new`."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} to {new}")
    if old in (0, new):
        return []
    proof: list[Range] = []
    start, end, m, whole = 0, new, old, True  # SUBPROOF(m, D[start:end], whole)
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append((start + k, end))
            end = start + k
        else:
            proof.append((start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:
        proof.append((start, end))
    proof.reverse()
    return proof


def nodes_for(ranges: Iterable[Range]) -> set[Node]:
    """Every perfect subtree the hashes of `ranges` are folded from."""
    return {node for start, end in ranges for node in perfect_nodes(start, end)}


def range_hash(start: int, end: int, hashes: Mapping[Node, bytes]) -> bytes:
    """MTH(D[start:end]) for a range a proof carries, from its perfect subtrees' hashes."""
    nodes = perfect_nodes(start, end)
    result = hashes[nodes[-1]]
    for node in reversed(nodes[:-1]):
        result = node_hash(hashes[node], result)
    return result


def proof_hashes(ranges: Sequence[Range], hashes: Mapping[Node, bytes]) -> list[bytes]:
    return [range_hash(start, end, hashes) for start, end in ranges]


# --- a log that stores one level in `stride` ----------------------------------------------------


def stored_below(node: Node, stride: int) -> list[Node]:
    """The nodes a log that stores only the levels divisible by `stride` (and the leaves)
    keeps for `node`: the node itself, or its `2**k` descendants at the stored level below."""
    level, index = node
    k = level % stride
    return [(level - k, (index << k) + child) for child in range(1 << k)]


def fold(values: Sequence[bytes]) -> bytes:
    """The hash of a perfect subtree from its descendants' hashes at one level (a power of two
    of them, left to right)."""
    layer = list(values)
    while len(layer) > 1:
        layer = [node_hash(layer[i], layer[i + 1]) for i in range(0, len(layer), 2)]
    return layer[0]


def rebuild(nodes: Iterable[Node], stored: Mapping[Node, bytes], stride: int) -> dict[Node, bytes]:
    """The hashes of `nodes` from what a log storing one level in `stride` holds (KeyError
    naming a stored node that is missing)."""
    return {node: fold([stored[n] for n in stored_below(node, stride)]) for node in nodes}


# --- appending -------------------------------------------------------------------------------


@dataclass
class CompactRange:
    """A tree of `size` leaves as its frontier's hashes (largest subtree first): enough to
    append and to compute the root, whatever the size. `append` also returns every perfect
    subtree the new leaves complete, which is what a log stores to answer proofs later."""

    size: int = 0
    hashes: list[bytes] = field(default_factory=list)

    @classmethod
    def of(cls, size: int, hashes: Mapping[Node, bytes]) -> CompactRange:
        return cls(size, [hashes[node] for node in frontier(size)])

    def append(self, leaf_hashes: Iterable[bytes]) -> list[tuple[Node, bytes]]:
        """Add leaves (already hashed, `leaf_hash`); the completed subtrees above the leaves,
        `(node, hash)`, in the order they complete."""
        completed: list[tuple[Node, bytes]] = []
        stack = self.hashes
        size = self.size
        for value in leaf_hashes:
            index, level = size, 0
            while index & 1:  # a left sibling waits: the pair completes the node above
                value = node_hash(stack.pop(), value)
                index >>= 1
                level += 1
                completed.append(((level, index), value))
            stack.append(value)
            size += 1
        self.size = size
        return completed

    def root(self) -> bytes:
        if not self.hashes:
            return EMPTY_ROOT
        result = self.hashes[-1]
        for value in reversed(self.hashes[:-1]):
            result = node_hash(value, result)
        return result

    def nodes(self) -> dict[Node, bytes]:
        return dict(zip(frontier(self.size), self.hashes, strict=True))


def root_of(leaf_hashes: Iterable[bytes]) -> bytes:
    tree = CompactRange()
    tree.append(leaf_hashes)
    return tree.root()


# --- verifying (RFC 9162 2.1.3.2 and 2.1.4.2, step by step) -----------------------------------


def verify_inclusion(
    leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes
) -> bool:
    """Whether `path` proves that `leaf` (a leaf hash) is leaf `index` of the tree of `size`
    whose root is `root`."""
    # 1. The index must be inside the tree.
    if not 0 <= index < size:
        return False
    # 2. fn and sn: the leaf's index and the last index.
    fn, sn = index, size - 1
    # 3. r starts as the leaf hash.
    r = leaf
    # 4. Fold each hash of the path in, on the side the index says.
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    # 5. The path must have been exactly long enough, and lead to the root.
    return sn == 0 and r == root


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether `proof` shows that the tree of `old` leaves with root `old_root` is a prefix of
    the tree of `new` leaves with root `new_root`."""
    if not 0 <= old <= new:
        return False
    if old == new:  # the same tree: nothing to prove, and the roots must agree
        return not proof and old_root == new_root
    if old == 0:  # every tree extends the empty one
        return not proof and old_root == EMPTY_ROOT
    # 0. A proof between two different non-empty trees is never empty.
    if not proof:
        return False
    path = list(proof)
    # 1. When old is a power of two, the old root is the proof's own first node.
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    # 2. fn and sn: the last index of each tree.
    fn, sn = old - 1, new - 1
    # 3. Climb past the levels where the old tree's last leaf is a right child.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # 4. Both roots start from the first hash.
    fr = sr = path[0]
    # 5. Fold the rest in: into both roots on the left, into the new root only on the right.
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # 6. Both roots must come out, and the proof must have reached the top.
    return sn == 0 and fr == old_root and sr == new_root
