"""RFC 6962 hashing and proofs (`tms.tlog.merkle`), checked against the Certificate
Transparency vectors and, for random trees, against `rfc6962` (the RFCs' own recursive
definitions and verification algorithms, written separately in the tests)."""

from __future__ import annotations

import itertools
import random

import pytest
import rfc6962 as rfc
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.tlog import merkle
from tms.tlog.merkle import CompactRange, Node

LEAVES = [rfc.leaf(e) for e in rfc.CT_ENTRIES]


def stored_tree(
    batches: list[list[bytes]],
) -> tuple[CompactRange, dict[Node, bytes], list[bytes]]:
    """What a log stores after appending `batches` of entries: its compact range, every
    perfect subtree it completed (leaves included), and the roots after each batch."""
    tree = CompactRange()
    nodes: dict[Node, bytes] = {}
    roots = []
    for batch in batches:
        hashes = [merkle.leaf_hash(e) for e in batch]
        nodes.update(((0, tree.size + i), h) for i, h in enumerate(hashes))
        nodes.update(tree.append(hashes))
        roots.append(tree.root())
    return tree, nodes, roots


def test_the_ct_vectors() -> None:
    for size, root in enumerate(rfc.CT_ROOTS):
        assert merkle.root_of(LEAVES[:size]).hex() == root
        assert rfc.mth(rfc.CT_ENTRIES[:size]).hex() == root  # the reference agrees, too
    _, nodes, _ = stored_tree([rfc.CT_ENTRIES])
    for index, size, expected in rfc.CT_INCLUSION:
        hashes = merkle.proof_hashes(merkle.inclusion_ranges(index, size), nodes)
        assert [h.hex() for h in hashes] == expected
        root = bytes.fromhex(rfc.CT_ROOTS[size])
        assert merkle.verify_inclusion(LEAVES[index], index, size, hashes, root)
        assert rfc.verify_inclusion(index, size, LEAVES[index], hashes, root)
    for old, new, expected in rfc.CT_CONSISTENCY:
        hashes = merkle.proof_hashes(merkle.consistency_ranges(old, new), nodes)
        assert [h.hex() for h in hashes] == expected
        roots = bytes.fromhex(rfc.CT_ROOTS[old]), bytes.fromhex(rfc.CT_ROOTS[new])
        assert merkle.verify_consistency(old, new, *roots, hashes)
        assert rfc.verify_consistency(old, new, *roots, hashes)


def test_every_proof_of_small_trees_is_the_rfcs() -> None:
    entries = [bytes([i, i * 7 % 256]) for i in range(40)]
    _, nodes, _ = stored_tree([entries])
    for size in range(1, len(entries) + 1):
        root = rfc.mth(entries[:size])
        assert merkle.range_hash(0, size, nodes) == root
        for index in range(size):
            hashes = merkle.proof_hashes(merkle.inclusion_ranges(index, size), nodes)
            assert hashes == rfc.path(index, entries[:size])
        for old in range(1, size + 1):
            hashes = merkle.proof_hashes(merkle.consistency_ranges(old, size), nodes)
            assert hashes == rfc.proof(old, entries[:size])
            assert rfc.verify_consistency(old, size, rfc.mth(entries[:old]), root, hashes)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.integers(1, 70), min_size=1, max_size=12),
    data=st.data(),
)
def test_random_appends_and_proofs(batches: list[int], data: st.DataObject) -> None:
    """Append random batches, then ask for random proofs: each proof verifies with the RFC's
    algorithm against the RFC's root, and fails once any of its hashes is flipped."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    entries = [rng.randbytes(32) for _ in range(sum(batches))]
    cut = [0]
    for size in batches:
        cut.append(cut[-1] + size)
    tree, nodes, roots = stored_tree([entries[a:b] for a, b in itertools.pairwise(cut)])
    sizes = cut[1:]
    for root, size in zip(roots, sizes, strict=True):
        assert root == rfc.mth(entries[:size])
    assert CompactRange.of(tree.size, nodes).root() == roots[-1]  # restartable from storage
    for _ in range(5):
        size = data.draw(st.sampled_from(sizes))
        index = data.draw(st.integers(0, size - 1))
        hashes = merkle.proof_hashes(merkle.inclusion_ranges(index, size), nodes)
        root = rfc.mth(entries[:size])
        assert rfc.verify_inclusion(index, size, rfc.leaf(entries[index]), hashes, root)
        assert not rfc.verify_inclusion(index, size, rfc.leaf(entries[index] + b"x"), hashes, root)
        old = data.draw(st.sampled_from(sizes))
        old, new = min(old, size), max(old, size)
        proof = merkle.proof_hashes(merkle.consistency_ranges(old, new), nodes)
        old_root, new_root = rfc.mth(entries[:old]), rfc.mth(entries[:new])
        assert rfc.verify_consistency(old, new, old_root, new_root, proof)
        assert merkle.verify_consistency(old, new, old_root, new_root, proof)
        for i in range(len(proof)):
            bent = [*proof[:i], bytes(32), *proof[i + 1 :]]
            assert not rfc.verify_consistency(old, new, old_root, new_root, bent)
            assert not merkle.verify_consistency(old, new, old_root, new_root, bent)


def test_completed_subtrees_are_exactly_the_perfect_ones() -> None:
    entries = [bytes([i]) for i in range(100)]
    _, nodes, _ = stored_tree([entries[:3], entries[3:64], entries[64:65], entries[65:]])
    for (level, index), value in nodes.items():
        width = 1 << level
        assert value == rfc.mth(entries[index * width : (index + 1) * width])
    perfect = {(lv, i) for lv in range(7) for i in range(100 >> lv)}
    assert set(nodes) == perfect


def test_the_verifiers_refuse_what_does_not_fit() -> None:
    root = merkle.root_of(LEAVES)
    path = merkle.proof_hashes(merkle.inclusion_ranges(3, 8), stored_tree([rfc.CT_ENTRIES])[1])
    assert merkle.verify_inclusion(LEAVES[3], 3, 8, path, root)
    assert not merkle.verify_inclusion(LEAVES[3], 8, 8, path, root)  # outside the tree
    assert not merkle.verify_inclusion(LEAVES[3], 3, 8, path[:-1], root)  # too short
    assert not merkle.verify_inclusion(LEAVES[3], 3, 8, [*path, root], root)  # too long
    assert not merkle.verify_inclusion(LEAVES[3], 2, 8, path, root)  # another place
    assert merkle.verify_consistency(0, 8, merkle.EMPTY_ROOT, root, [])
    assert merkle.verify_consistency(8, 8, root, root, [])
    assert not merkle.verify_consistency(8, 8, root, merkle.EMPTY_ROOT, [])
    assert not merkle.verify_consistency(3, 8, root, root, [])  # never empty between sizes
    assert not merkle.verify_consistency(8, 3, root, root, [root])
    with pytest.raises(ValueError):
        merkle.inclusion_ranges(8, 8)
    with pytest.raises(ValueError):
        merkle.consistency_ranges(9, 8)


def test_perfect_nodes_and_frontier() -> None:
    assert merkle.frontier(0) == []
    assert merkle.frontier(6) == [(2, 0), (1, 2)]
    assert merkle.frontier(2**40 + 1) == [(40, 0), (0, 2**40)]
    assert merkle.perfect_nodes(4, 7) == [(1, 2), (0, 6)]
    assert merkle.perfect_nodes(6, 8) == [(1, 3)]
