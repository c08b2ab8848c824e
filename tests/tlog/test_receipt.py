"""Receipts (`tms.tlog.receipt`), offline and pure: the C2SP tlog-proof text as the spec lays it
out, made for an event of a small log and checked against its checkpoint; each part changed is
refused at its own step; the format's spelling rules (no leading zeros, canonical base64, 32-byte
hashes) hold."""

from __future__ import annotations

import base64

import pytest
from factories import claim, signed, terms

from tms.nostr.events import Event, SecretKey
from tms.tlog.cosignature import CosignerKey
from tms.tlog.merkle import inclusion_ranges, leaf_hash, perfect_nodes, range_hash, root_of
from tms.tlog.note import LogSigner, NoteSigner
from tms.tlog.policy import Policy
from tms.tlog.receipt import HEADER, Receipt, ReceiptRefused, check_receipt, make_receipt

OWNER = SecretKey.generate()
SIGNER = LogSigner(NoteSigner.generate("log.example"), "log.example")
EVENTS = [Event.from_dict(claim(OWNER, "lab", f"Claim {i}.")) for i in range(7)]
LEAVES = [leaf_hash(bytes.fromhex(e.id)) for e in EVENTS]
NOTE = SIGNER.sign("lab", len(LEAVES), root_of(LEAVES))
KEYS = [SIGNER.key.verifier()]


def _path(index: int) -> list[bytes]:
    hashes = {
        node: _node_hash(node)
        for s, e in inclusion_ranges(index, 7)
        for node in perfect_nodes(s, e)
    }
    return [range_hash(s, e, hashes) for s, e in inclusion_ranges(index, 7)]


def _node_hash(node: tuple[int, int]) -> bytes:
    level, index = node
    return root_of(LEAVES[index << level : (index + 1) << level])


def _receipt(index: int = 5) -> str:
    return make_receipt(EVENTS[index], index, _path(index), NOTE)


def _refused(text: str, **kwargs: object) -> ReceiptRefused:
    with pytest.raises(ReceiptRefused) as caught:
        check_receipt(text, **{"log_keys": KEYS, **kwargs})  # type: ignore[arg-type]
    return caught.value


def test_a_receipt_is_the_spec_s_text_and_checks() -> None:
    text = _receipt()
    lines = text.split("\n")
    assert lines[0] == HEADER
    assert base64.b64decode(lines[1].removeprefix("extra ")) == EVENTS[5].to_json().encode()
    assert lines[2] == "index 5"
    assert len(lines[3:6]) == 3 and lines[6] == ""  # 7 leaves: three hashes, then a blank line
    assert "\n".join(lines[7:]) == NOTE
    verified = check_receipt(text, event_id=EVENTS[5].id, log_keys=KEYS)
    assert (verified.index, verified.collection, verified.checkpoint.size) == (5, "lab", 7)
    for index in range(7):
        assert check_receipt(_receipt(index), log_keys=KEYS).event == EVENTS[index]
    assert Receipt.parse(text).encode() == text


def test_each_part_changed_is_refused_at_its_step() -> None:
    text = _receipt()
    assert _refused(text.replace("index 5", "index 4")).step == "inclusion"
    assert _refused(_receipt(4).replace("index 4", "index 5")).step == "inclusion"
    other = make_receipt(EVENTS[4], 5, _path(5), NOTE)
    assert _refused(other).step == "inclusion"
    assert _refused(text, event_id=EVENTS[4].id).step == "event"
    assert _refused(text, event=EVENTS[4]).step == "event"
    assert _refused(text, log_keys=[]).reason == "no log key to check the checkpoint against"
    elsewhere = SIGNER.sign("other", len(LEAVES), root_of(LEAVES))
    moved = make_receipt(EVENTS[5], 5, _path(5), elsewhere)
    refused = _refused(moved)
    assert refused.step == "entry"
    assert "filed in collection 'lab', but the checkpoint is of the log 'log.example/c/other'" in (
        refused.reason
    )
    # a profile or the terms are no log's entries
    unscoped = Event.from_dict(terms(OWNER))
    assert _refused(make_receipt(unscoped, 5, _path(5), NOTE)).step == "entry"
    # an event whose signature is another key's
    forged = Event.from_dict({**EVENTS[5].to_dict(), "sig": EVENTS[4].sig})
    refused = _refused(make_receipt(forged, 5, _path(5), NOTE))
    assert (refused.step, refused.reason) == (
        "event",
        "signature does not verify for this pubkey and id",
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda t: t.replace(HEADER, "c2sp.org/tlog-proof@v0"), "the first line is not"),
        (lambda t: t.replace("index 5", "index 05"), "no 'index <n>' line"),
        (lambda t: t.replace("index 5", "index -5"), "no 'index <n>' line"),
        (lambda t: t.replace("\n\n", "\n"), "no blank line before the checkpoint"),
        (lambda t: t.replace("\nindex 5\n", "\nindex 5\nAAAA\n"), "is not 32 bytes"),
        (lambda t: t.replace("=\n", "\n", 1), "is not base64"),
        (lambda t: t.split("\n\n")[0] + "\n\nlab\n", "the checkpoint is not a signed note"),
        (lambda t: t.replace("extra ", "extra !"), "the extra data is not base64"),
    ],
)
def test_the_format_is_spelled_one_way(change: object, why: str) -> None:
    text = change(_receipt())  # type: ignore[operator]
    refused = _refused(text)
    assert refused.step == "format", refused
    assert why in refused.reason


def test_too_long_a_path_is_refused_before_any_hash_is_read() -> None:
    text = _receipt().replace("\nindex 5\n", "\nindex 5\n" + "A" * 43 + "\n", 1)
    padded = _receipt().replace(
        "\nindex 5\n", "\nindex 5\n" + (base64.b64encode(bytes(32)).decode() + "\n") * 64, 1
    )
    assert "longer than 63 hashes" in _refused(padded).reason
    assert _refused(text).step == "format"


def test_a_policy_s_quorum_and_its_log_line() -> None:
    witness = CosignerKey.generate("w.example")
    policy = Policy.parse(
        f"log {SIGNER.key.verifier().encode()}\nwitness W {witness.verifier().encode()}\nquorum W\n"
    )
    text = _receipt()
    refused = _refused(text, policy=policy)
    assert (refused.step, refused.reason) == (
        "quorum",
        "the checkpoint is cosigned by no witness of the policy; the policy needs witness W",
    )
    body = NOTE[: NOTE.index("\n\n") + 1]
    cosigned = text + witness.cosign(body, 1_700_000_000)
    verified = check_receipt(cosigned, policy=policy)  # the policy's log line is the key
    assert verified.witnessed_by == ("W",)
    assert verified.lines()[-1] == "quorum: ok (witness W; cosigned by W)"
    stranger = CosignerKey.generate("w.example")  # same name, another key: not W's line
    assert _refused(text + stranger.cosign(body, 1), policy=policy).step == "quorum"


def test_a_member_list_is_an_entry_too() -> None:
    listed = Event.from_dict(signed(OWNER, 4705, {"collection": "lab", "members": []}))
    leaves = [leaf_hash(bytes.fromhex(listed.id))]
    note = SIGNER.sign("lab", 1, root_of(leaves))
    assert check_receipt(make_receipt(listed, 0, [], note), log_keys=KEYS).index == 0
