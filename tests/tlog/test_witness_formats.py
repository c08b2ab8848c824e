"""The witness formats, without a server: cosignature/v1 lines (C2SP tlog-cosignature), the
policy file and its quorum (tlog-policy), and the add-checkpoint protocol's bodies and
decisions (tlog-witness), each against the rule of its spec it checks."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import LogError
from tms.tlog.cosignature import CosignerKey, CosignerVerifier, signed_message
from tms.tlog.merkle import consistency_ranges, leaf_hash, nodes_for, proof_hashes, root_of
from tms.tlog.note import Checkpoint, NoteSigner, NoteVerifier, split_note
from tms.tlog.policy import Policy
from tms.tlog.witness import (
    Stored,
    Submission,
    TrustedLog,
    TrustedLogs,
    WitnessRefusal,
    admit,
    judge,
    parse_size,
    signed_lines,
)

ORIGIN = "tms.example/c/lab"


def _tree(n: int) -> list[bytes]:
    return [leaf_hash(bytes([i % 256]) * 32) for i in range(n)]


def _root(n: int) -> bytes:
    return root_of(_tree(n))


def _proof(old: int, new: int) -> tuple[bytes, ...]:
    """RFC 6962's consistency proof between two sizes of `_tree`, computed the slow way."""
    ranges = consistency_ranges(old, new)
    leaves = _tree(new)
    hashes = {}
    for level, index in nodes_for(ranges):
        span = leaves[index << level : (index + 1) << level]
        hashes[(level, index)] = root_of(span)
    return tuple(proof_hashes(ranges, hashes))


LOG = NoteSigner.generate("tms.example")


def _note(size: int, signer: NoteSigner = LOG) -> str:
    return Checkpoint(ORIGIN, size, _root(size)).sign(signer)


def test_a_cosignature_is_the_spec_s_message_signed_under_the_0x04_key_id() -> None:
    key = CosignerKey.generate("witness.example/w1")
    text = Checkpoint(ORIGIN, 5, _root(5)).text()
    line = key.cosign(text, 1_679_315_147)
    dash, name, encoded = line.rstrip("\n").split(" ")
    assert dash == "\u2014" and name == "witness.example/w1"
    raw = base64.b64decode(encoded)
    public = key.verifier().public
    expected_id = hashlib.sha256(b"witness.example/w1\n\x04" + public).digest()[:4]
    assert raw[:4] == expected_id
    assert struct.unpack(">Q", raw[4:12]) == (1_679_315_147,)
    message = f"cosignature/v1\ntime 1679315147\n{text}".encode()
    assert message == signed_message(text, 1_679_315_147)
    Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message)  # raises if not


def test_witness_keys_round_trip_and_are_never_log_keys() -> None:
    key = CosignerKey.generate("witness.example/w1")
    assert CosignerKey.parse(key.encode()).verifier() == key.verifier()
    vkey = key.verifier().encode()
    assert CosignerVerifier.parse(vkey) == key.verifier()
    assert "PRIVATE" not in repr(key)
    with pytest.raises(LogError, match="0x04"):
        CosignerVerifier.parse(LOG.verifier().encode())  # a log's 0x01 key is no witness key
    name, key_id, encoded = vkey.split("+", 2)
    with pytest.raises(LogError, match="ID does not match"):
        CosignerVerifier.parse(f"{name}x+{key_id}+{encoded}")


def _policy(*keys: CosignerKey, quorum: str) -> Policy:
    lines = [f"log {LOG.verifier().encode()}"]
    lines += [f"witness W{i} {k.verifier().encode()}" for i, k in enumerate(keys, 1)]
    lines.append(quorum)
    return Policy.parse("\n".join(lines) + "\n")


def test_a_quorum_counts_verified_cosignatures_of_known_witnesses_only() -> None:
    w1, w2, w3, stranger = (CosignerKey.generate(f"w.example/{i}") for i in range(4))
    policy = _policy(w1, w2, w3, quorum="group g 2 W1 W2 W3\nquorum g")
    note = _note(7)
    text, _ = split_note(note)
    once = note + w1.cosign(text, 100) + stranger.cosign(text, 100)
    verdict = policy.judge(once)
    assert verdict.names == ["w.example/0"] and not verdict.quorum
    assert verdict.needed == "2 of 3 (W1, W2, W3)"
    twice = once + w3.cosign(text, 101)
    verdict = policy.judge(twice)
    assert verdict.quorum and verdict.names == ["w.example/0", "w.example/2"]


def test_a_forged_cosignature_is_refused_with_the_witness_named() -> None:
    w1 = CosignerKey.generate("w.example/1")
    policy = _policy(w1, quorum="quorum W1")
    text, _ = split_note(_note(7))
    other_text, _ = split_note(_note(8))
    forged = _note(7) + w1.cosign(other_text, 5)  # a cosignature of another checkpoint
    with pytest.raises(LogError, match=r"witness W1: the cosignature by witness w\.example/1"):
        policy.judge(forged)
    assert policy.judge(_note(7) + w1.cosign(text, 5)).quorum


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("log x\n", "policy line 1"),
        ("quorum W1\n", "'W1' is not defined above"),
        ("quorum none\nquorum none\n", "exactly one quorum"),
        ("", "no quorum line"),
        ("group g 1 nobody\nquorum g\n", "'nobody' is not defined"),
        ("frobnicate\nquorum none\n", "unknown keyword"),
    ],
)
def test_a_bad_policy_is_refused_naming_its_line(text: str, message: str) -> None:
    with pytest.raises(LogError, match=message):
        Policy.parse(text)


def test_policy_groups_nest_and_none_needs_nobody() -> None:
    keys = [CosignerKey.generate(f"w.example/{i}") for i in range(4)]
    lines = "\n".join(f"witness W{i} {k.verifier().encode()}" for i, k in enumerate(keys))
    policy = Policy.parse(
        lines + "\n# comment\n\tgroup a any W0 W1\ngroup b all W2 W3\ngroup ab all a b\nquorum ab\n"
    )
    text, _ = split_note(_note(3))
    note = _note(3) + keys[1].cosign(text, 1) + keys[2].cosign(text, 1)
    assert not policy.judge(note).quorum
    assert policy.judge(note + keys[3].cosign(text, 1)).quorum
    assert Policy.parse("quorum none\n").judge(_note(3)).quorum
    with pytest.raises(LogError, match="already listed"):
        Policy.parse(lines + "\n" + lines.replace("W0", "X0", 1).split("\n")[0] + "\nquorum W0\n")


# --- add-checkpoint ------------------------------------------------------------------------


def _logs() -> TrustedLogs:
    return TrustedLogs.parse(f"log tms.example/c/ {LOG.verifier().encode()}\n")


def test_the_request_body_round_trips_as_the_spec_shows_it() -> None:
    submission = Submission(4, _proof(4, 9), _note(9))
    body = submission.body()
    assert body.startswith(b"old 4\n") and b"\n\ntms.example/c/lab\n9\n" in body
    assert Submission.parse(body) == submission


@pytest.mark.parametrize(
    "body",
    [
        b"old 01\n\nx",
        b"old -1\n\nx",
        b"olds 1\n\nx",
        b"old 1\nnot base64!\n\nx",
        b"old 1\n" + b"AAAA\n" + b"\nx",  # a proof line that is not 32 bytes
        b"old 1\n" + b"".join([base64.b64encode(bytes(32)) + b"\n"] * 64) + b"\nx",
        b"old 1\nno blank line",
        b"\xff\xfe",
    ],
)
def test_a_malformed_body_is_a_400(body: bytes) -> None:
    with pytest.raises(WitnessRefusal) as refused:
        Submission.parse(body)
    assert refused.value.status == 400


@given(st.binary(max_size=300))
def test_any_body_parses_or_is_a_400(body: bytes) -> None:
    try:
        Submission.parse(body)
    except WitnessRefusal as exc:
        assert exc.status == 400


def test_judge_gives_each_status_the_protocol_names() -> None:
    logs = _logs()
    first = judge(Submission(0, (), _note(4)), logs, None)
    assert first.size == 4
    stored = Stored(4, _root(4))
    assert judge(Submission(4, _proof(4, 9), _note(9)), logs, stored).size == 9
    cases = [
        (Submission(0, (), _note(9)), stored, 409),  # not the stored size
        (Submission(4, _proof(4, 9)[:-1], _note(9)), stored, 422),  # a proof that fails
        # the same size with another root: a tree that is not the one cosigned
        (Submission(4, (), Checkpoint(ORIGIN, 4, bytes(32)).sign(LOG)), stored, 422),
        (Submission(9, (), _note(4)), stored, 400),  # old above new
        (Submission(0, (), _note(4, NoteSigner.generate("tms.example"))), None, 403),
        # a line naming the trusted key (name and key ID) whose signature fails: 403
        (Submission(0, (), _only_bad_line(4)), None, 403),
        # beside a good one, two lines by one key: refused as malformed before either is
        # verified (test_a_line_copied_a_hundred_times_costs_no_verification)
        (Submission(0, (), _note(4) + _bad_line(_note(5))), None, 400),
        # size 0 must carry the empty tree's root; from size 0 the proof is empty
        (Submission(0, (), Checkpoint(ORIGIN, 0, bytes(32)).sign(LOG)), None, 422),
        (Submission(0, _proof(2, 4), _note(4)), None, 422),
        (
            Submission(0, (), Checkpoint("elsewhere/c/x", 1, _root(1)).sign(LOG)),
            None,
            404,
        ),
    ]
    for submission, held, status in cases:
        with pytest.raises(WitnessRefusal) as refused:
            judge(submission, logs, held)
        assert refused.value.status == status, (submission.old, status, str(refused.value))
        if status == 409:
            assert refused.value.size == 4


def _only_bad_line(size: int) -> str:
    """The checkpoint at `size` whose one signature line is the log key's over another note."""
    return _note(size).rsplit("\n", 2)[0] + "\n" + _bad_line(_note(size + 1))


def _bad_line(other_note: str) -> str:
    """The log key's signature line of another note: its name and key ID, a wrong signature."""
    return other_note.rsplit("\n", 2)[1] + "\n"


def test_a_size_0_checkpoint_of_the_empty_tree_is_cosigned() -> None:
    empty = Checkpoint(ORIGIN, 0, root_of([])).sign(LOG)
    assert judge(Submission(0, (), empty), _logs(), None).size == 0


def test_the_witness_keeps_the_log_s_verified_signature_and_no_other_line() -> None:
    stranger = NoteSigner.generate("stranger.example")
    note = _note(4)
    text, _ = split_note(note)
    submitted = note + stranger.sign(text).rsplit("\n", 2)[1] + "\n"
    kept = signed_lines(submitted, _logs().keys_for(ORIGIN))
    assert kept == note


def test_a_409_body_is_a_size_and_a_newline() -> None:
    assert parse_size(b"20852014\n") == 20852014
    for bad in (b"12", b"012\n", b"x\n", b""):
        with pytest.raises(LogError):
            parse_size(bad)


def test_a_prefix_origin_covers_every_collection_and_nothing_else() -> None:
    logs = _logs()
    assert logs.keys_for("tms.example/c/lab") and logs.keys_for("tms.example/c/other")
    assert not logs.keys_for("tms.example/c/") and not logs.keys_for("tms.example.evil/c/x")
    exact = TrustedLogs.parse(f"log tms.example/c/lab {LOG.verifier().encode()}\n")
    assert exact.keys_for("tms.example/c/lab") and not exact.keys_for("tms.example/c/lab2")


class _Counting(NoteVerifier):
    """The log's real key, counting the signatures it is asked to verify."""

    verified: list[bytes]

    def verifies(self, text: str, signature: bytes) -> bool:
        self.verified.append(signature)
        return NoteVerifier.verifies(self, text, signature)


def _counting_logs() -> tuple[TrustedLogs, _Counting]:
    key = _Counting(LOG.verifier().name, LOG.verifier().public)
    object.__setattr__(key, "verified", [])
    return TrustedLogs((TrustedLog("tms.example/c/", key),)), key


def test_a_line_copied_a_hundred_times_costs_no_verification() -> None:
    """Issue 33.6: a published checkpoint with its valid signature line copied 100 times cost
    100 verifications (11 ms of CPU) before being answered; now the copies are refused as
    malformed (400) before any signature is verified, and an honest note costs one."""
    logs, key = _counting_logs()
    note = _note(4)
    line = note.rsplit("\n", 2)[1] + "\n"
    copied = note + line * 99
    assert len(split_note(copied)[1]) == 100
    with pytest.raises(WitnessRefusal) as refused:
        admit(Submission(0, (), copied), logs)
    assert refused.value.status == 400
    assert str(refused.value) == "the checkpoint carries 100 signature lines by tms.example"
    assert key.verified == []
    # the note opened by a verifier is refused alike, with nothing verified
    with pytest.raises(LogError, match=r"carries 100 signature lines by tms\.example$"):
        key.open(copied)
    assert key.verified == []
    # an honest checkpoint: one verification, however many other keys' lines it carries
    others = "".join(
        NoteSigner.generate(f"other{i}.example").sign(split_note(note)[0]).rsplit("\n", 2)[1] + "\n"
        for i in range(20)
    )
    assert admit(Submission(0, (), note + others), logs).size == 4
    assert len(key.verified) == 1


def test_what_needs_no_stored_state_is_judged_without_it() -> None:
    """`admit` refuses what any witness refuses whatever it holds (form, origin, signature,
    an old size above the new one), so the service reads the database only for the rest."""
    logs, key = _counting_logs()
    refused_alone = [
        (Submission(0, (), "not a note\n"), 400),
        (Submission(0, (), Checkpoint("elsewhere/c/x", 1, _root(1)).sign(LOG)), 404),
        (Submission(0, (), _only_bad_line(4)), 403),
        (Submission(9, (), _note(4)), 400),
    ]
    for submission, status in refused_alone:
        with pytest.raises(WitnessRefusal) as refused:
            admit(submission, logs)
        assert refused.value.status == status
    assert len(key.verified) == 2  # the bad line, and the good one of the old-above-new case
