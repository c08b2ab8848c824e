"""`tms verify-export`: an export and a checkpoint taken home prove, offline, that the server
showed every event of the collection, unaltered and in order. Dropping, swapping or changing
any line of a real export is detected and named; the command runs as a member runs it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from factories import (
    BIN,
    MEMBER,
    OWNER,
    T0,
    claim,
    environment,
    evidence,
    link,
    members,
    profile,
    sign,
    signed,
)
from publishing import join, open_collection, publish, readable

from tms.cli.verify_export import run
from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger
from tms.tlog.audit import NO_CHECKPOINT, Report, audit
from tms.tlog.export_lines import checkpoint_line, read_line
from tms.tlog.merkle import leaf_hash, root_of
from tms.tlog.note import Checkpoint, NoteSigner

pytestmark = pytest.mark.anyio

DOC = "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity."


class Published:
    def __init__(self, ledger: Ledger, lines: list[str], kept: str) -> None:
        self.ledger = ledger
        self.lines = lines  # the export, its checkpoint line last
        self.kept = kept  # a checkpoint a member kept from an earlier publish
        self.key = ledger.log.signer.key.verifier()

    def audit(self, lines: list[str], kept: list[str] | None = None) -> Report:
        items = [read_line(n, line.encode()) for n, line in enumerate(lines, start=1)]
        return audit(items, self.key, [] if kept is None else kept)


@pytest.fixture
async def published(ledger: Ledger) -> AsyncIterator[Published]:
    """A collection written by two keys over three publishes, exported with its checkpoint."""
    first = await open_collection(ledger, OWNER, "lab", [MEMBER])
    kept = first["checkpoints"][0]["note"]
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", DOC)
    c1 = claim(MEMBER, "lab", "DAO explains HIT.")
    await publish(ledger, profile(MEMBER, "bot"), doc, c1)
    c2 = claim(OWNER, "lab", "Serum DAO predicts symptoms.")
    supports = link(OWNER, "lab", doc["id"], c1["id"], "reduced diamine oxidase")
    await publish(ledger, profile(OWNER, "owner"), c2, supports)
    lines = [
        line
        async for line in Exporter(ledger.pool).lines(
            await readable(Exporter(ledger.pool), "lab"), checkpoint=True
        )
    ]
    yield Published(ledger, lines, kept)


def problems(report: Report) -> list[str]:
    return [text for _, text in sorted(report.problems, key=lambda p: p[0])]


async def test_a_whole_export_verifies(published: Published) -> None:
    last = json.loads(published.lines[-1])
    assert set(last) == {"checkpoint", "entries", "others"}
    assert len(last["entries"]) == 5 and len(last["others"]) == 4  # 2 terms, 2 profiles
    report = published.audit(published.lines, [published.kept])
    assert report.ok, problems(report)
    assert (report.events, report.entries) == (9, 5)
    assert "the first 5 entries hash to the root signed at size 5" in report.findings[-1]
    assert "the first 1 entries hash" in report.findings[0]  # the checkpoint the member kept


async def test_dropping_any_line_is_detected_and_named(published: Published) -> None:
    body = published.lines[:-1]
    for i, line in enumerate(body):
        event = json.loads(line)
        report = published.audit([*body[:i], *body[i + 1 :], published.lines[-1]])
        assert not report.ok, i
        assert any("missing: " in p and event["id"] in p for p in problems(report)), (
            i,
            problems(report),
        )
    dropped = published.audit(body)  # the checkpoint line itself: nothing proves the file whole
    assert problems(dropped) == [] and not dropped.ok
    assert dropped.unproven == NO_CHECKPOINT
    assert published.audit(body, [published.kept]).ok  # a kept checkpoint still proves a prefix


# --- without a checkpoint: every line, and the file against itself ------------------------------


async def test_without_a_checkpoint_the_events_are_still_verified(published: Published) -> None:
    body = published.lines[:-1]
    report = published.audit(body)
    assert (report.events, report.entries, report.collection) == (9, 5, "lab")
    assert report.summary() == (
        "9 events verified, 5 log entries of 'lab': no problem found, but not proven whole "
        "(no checkpoint)"
    )
    assert report.lines()[-1] == NO_CHECKPOINT
    assert "tms export --checkpoint SLUG" in NO_CHECKPOINT and "?checkpoint=1" in NO_CHECKPOINT
    event = json.loads(body[4])
    changed = json.dumps({**event, "content": event["content"] + " "}, separators=(",", ":"))
    report = published.audit([*body[:4], changed, *body[5:]])
    assert problems(report)[0].startswith(f"line 5 ({event['id']}): changed: id does not match")
    assert report.summary().endswith("8 events verified, 5 log entries of 'lab': 1 problem")


async def test_without_a_checkpoint_a_cut_that_breaks_the_rules_is_named(
    published: Published,
) -> None:
    """Lines: 1 OWNER's terms, 2 the member list, 3 MEMBER's terms, 4 its profile, 5 evidence,
    6 a claim, 7 OWNER's profile, 8 a claim, 9 a link from 5 to 6. Dropping a terms line, the
    member list, or what the link cites breaks a rule every stored event obeyed; dropping a
    profile, or an entry nothing cites, does not (only a checkpoint shows those)."""
    body = published.lines[:-1]
    ids = [json.loads(line)["id"] for line in body]
    expected = {
        0: f"line 1 ({ids[1]}): its author {OWNER.pubkey} signed no terms",
        1: f"line 7 ({ids[7]}): its author {OWNER.pubkey} is neither the owner of 'lab'",
        2: f"line 4 ({ids[4]}): its author {MEMBER.pubkey} signed no terms",
        4: f"line 8 ({ids[8]}): its from {ids[4]} is not earlier in the file",
        5: f"line 8 ({ids[8]}): its to {ids[5]} is not earlier in the file",
    }
    for i, words in expected.items():
        report = published.audit([*body[:i], *body[i + 1 :]])
        assert any(p.startswith(words) for p in problems(report)), (i, problems(report))
    for i in (3, 6, 7, 8):
        assert problems(published.audit([*body[:i], *body[i + 1 :]])) == [], i


async def test_without_a_checkpoint_order_repeats_and_owners_are_checked(
    published: Published,
) -> None:
    body = published.lines[:-1]
    ids = [json.loads(line)["id"] for line in body]
    link_first = published.audit([*body[:4], body[8], *body[4:8]])
    assert (
        f"line 5 ({ids[8]}): its from {ids[4]} is not earlier in the file"
        in problems(link_first)[0]
    )
    repeated = published.audit([*body, body[5]])
    assert problems(repeated) == [f"line 10 ({ids[5]}): extra: repeats line 6"]
    takeover = json.dumps(members(MEMBER, "lab", [MEMBER.pubkey], created_at=T0 + 5))
    found = problems(published.audit([*body, takeover]))
    assert len(found) == 1 and "a member list signed by " + MEMBER.pubkey in found[0]
    removed = json.dumps(members(OWNER, "lab", [], created_at=T0 + 5))
    after = json.dumps(claim(MEMBER, "lab", "Written after its removal."))
    found = problems(published.audit([*body, removed, after]))
    assert len(found) == 1 and "line 2) nor on the member list current at this" in found[0]
    # A member list signed with an older clock is stored but not current: it changes nothing.
    behind = json.dumps(members(OWNER, "lab", [], created_at=T0 - 5))
    assert problems(published.audit([*body, behind, after])) == []
    wrong_kind = json.dumps(link(OWNER, "lab", ids[5], ids[4], "DAO"))  # from a claim
    found = problems(published.audit([*body, wrong_kind]))
    assert found == [
        f"line 10 ({json.loads(wrong_kind)['id']}): its from {ids[5]} is a claim, "
        "which it cannot be"
    ]


async def test_swapping_any_two_lines_is_detected(published: Published) -> None:
    body, last = published.lines[:-1], published.lines[-1]
    for i in range(len(body)):
        for j in range(i + 1, len(body)):
            swapped = list(body)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            report = published.audit([*swapped, last])
            assert not report.ok, (i, j)
            named = [p for p in problems(report) if "out of order" in p or "out of place" in p]
            assert named, (i, j, problems(report))


async def test_changing_any_line_is_detected(published: Published) -> None:
    body, last = published.lines[:-1], published.lines[-1]
    for i, line in enumerate(body):
        event = json.loads(line)
        for field, value in [("content", event["content"] + " "), ("created_at", 1)]:
            changed = json.dumps({**event, field: value}, separators=(",", ":"))
            report = published.audit([*body[:i], changed, *body[i + 1 :], last])
            assert problems(report)[0].startswith(f"line {i + 1} ({event['id']}): changed: id")
        # Another event in its place, validly signed (a different second: another id).
        forged = signed(
            MEMBER, event["kind"], event["content"], tags=event["tags"], created_at=T0 + 1
        )
        report = published.audit([*body[:i], json.dumps(forged), *body[i + 1 :], last])
        assert not report.ok and any(event["id"] in p for p in problems(report))


async def test_an_extra_event_and_an_altered_checkpoint_line(published: Published) -> None:
    body, last = published.lines[:-1], published.lines[-1]
    stranger = json.dumps(claim(MEMBER, "lab", "never published"))
    report = published.audit([*body, stranger, last])
    assert any("extra: not in the log" in p for p in problems(report))
    elsewhere = json.dumps(claim(MEMBER, "elsewhere", "another collection's"))
    assert "not of 'lab'" in problems(published.audit([elsewhere, *body, last]))[0]

    record = json.loads(last)
    record["entries"] = record["entries"][:-1]  # hide an entry from the list too
    report = published.audit([*body[:-1], json.dumps(record)])
    assert any("do not hash to the root it signs" in p for p in problems(report))


async def test_a_checkpoint_by_another_key_or_of_another_history(published: Published) -> None:
    other = NoteSigner.generate(published.key.name)
    note = Checkpoint("tms.invalid/c/lab", 5, bytes(32)).sign(other)
    report = published.audit(published.lines[:-1], [note])
    assert "no signature by the key" in problems(report)[0]

    # Signed by the server's own key, over a history it never showed: caught by the root.
    forked = published.ledger.log.signer.sign("lab", 2, root_of([leaf_hash(b"x")] * 2))
    report = published.audit(published.lines, [forked])
    assert problems(report) == [
        "the file's first 2 entries do not hash to the root signed at size 2: an entry is "
        "missing, extra, changed or out of order"
    ]


# --- the command ---------------------------------------------------------------------------------


def verify_export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "tms"), "verify-export", *args],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_the_command(published: Published, tmp_path: Path) -> None:
    export = tmp_path / "lab.jsonl"
    export.write_text("".join(f"{line}\n" for line in published.lines), encoding="utf-8")
    kept = tmp_path / "kept.txt"
    kept.write_text(published.kept, encoding="utf-8")
    key = published.key.encode()

    good = verify_export(str(export), "--checkpoint", str(kept), "--key", key)
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines()[-1] == "9 events verified, 5 log entries of 'lab': OK"

    plain = subprocess.run(  # tms verify checks each line, and leaves the last to verify-export
        [str(BIN / "tms"), "verify", str(export)], capture_output=True, text=True, check=False
    )
    assert (plain.returncode, plain.stdout) == (0, "9 events verified, 0 invalid\n")

    lines = published.lines
    export.write_text("".join(f"{line}\n" for line in [*lines[:4], *lines[5:]]))  # evidence
    bad = verify_export(str(export), "--key", key)
    assert bad.returncode == 1
    missing = f"missing: entry 1 of the log ({json.loads(lines[4])['id']}), after line 2"
    assert missing in bad.stdout.splitlines()

    key_file = tmp_path / "log-key"
    key_file.write_text(NoteSigner.generate("other").verifier().encode() + "\n")
    wrong = verify_export(str(export), "--key", str(key_file))
    assert wrong.returncode == 1 and "no signature by the key" in wrong.stdout

    junk = tmp_path / "junk.json"
    junk.write_text('{"x": 1}')
    for args, words in [
        ([str(export), "--key", "not a key"], "a verifier key is"),
        ([str(tmp_path / "missing.jsonl"), "--key", key], "cannot read"),
        ([str(export), "--checkpoint", str(junk), "--key", key], "no checkpoint found"),
    ]:
        refused = verify_export(*args)
        assert refused.returncode == 2, (args, refused.stdout)
        assert words in refused.stderr and refused.stderr.count("\n") == 1


async def test_the_command_on_an_export_without_a_checkpoint(
    published: Published, tmp_path: Path
) -> None:
    """It used to stop at "0 events verified, 0 log entries: 1 problem"."""
    export = tmp_path / "lab.jsonl"
    export.write_text("".join(f"{line}\n" for line in published.lines[:-1]), encoding="utf-8")
    result = verify_export(str(export), "--key", published.key.encode())
    assert result.returncode == 1, result.stderr
    *_, hint, summary = result.stdout.splitlines()
    assert summary == (
        "9 events verified, 5 log entries of 'lab': no problem found, but not proven whole "
        "(no checkpoint)"
    )
    assert hint == NO_CHECKPOINT
    assert "tms export --checkpoint SLUG, or /c/SLUG/export.jsonl?checkpoint=1" in hint

    lines = published.lines[:-1]
    export.write_text("".join(f"{line}\n" for line in [*lines[:4], *lines[5:]]))  # evidence
    cut = verify_export(str(export), "--key", published.key.encode())
    assert cut.returncode == 1
    assert cut.stdout.splitlines()[-1].endswith(
        "8 events verified, 4 log entries of 'lab': 1 problem"
    )
    assert "is not earlier in the file" in cut.stdout.splitlines()[0]


def test_big_exports_are_checked_by_worker_processes(tmp_path: Path) -> None:
    """Past a few thousand lines the signatures are checked in worker processes: same report."""
    key = NoteSigner.generate("tms.example.org")
    events = [sign(MEMBER, 4702, {"collection": "big", "text": f"claim {i}"}) for i in range(8_100)]
    terms_line = signed(MEMBER, 4706, {"version": "1", "sha256": "0" * 64})
    ids = [e.id for e in events]
    root = root_of(leaf_hash(bytes.fromhex(i)) for i in ids)
    note = Checkpoint("tms.example.org/c/big", len(ids), root).sign(key)
    lines = [json.dumps(terms_line), *(e.to_json() for e in events)]
    lines[5000] = lines[5000].replace("claim", "CLAIM")
    export = tmp_path / "big.jsonl"
    export.write_text("\n".join([*lines, checkpoint_line(note, ids, [(terms_line["id"], None)])]))
    out = tmp_path / "report.txt"
    with out.open("w") as stream:
        assert run(str(export), None, key.verifier().encode(), stream) == 1
    report = out.read_text().splitlines()
    assert report[0].startswith(f"line 5001 ({ids[4999]}): changed: id does not match")
    assert report[-1] == "8100 events verified, 8100 log entries of 'big': 1 problem"  # one changed


async def test_the_operators_export_ends_with_its_checkpoint(
    published: Published, db_url: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [str(BIN / "tms"), "export", "lab", "--checkpoint"],
        env=environment(TMS_DATABASE_URL=db_url),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().split("\n")[:-1] == published.lines
