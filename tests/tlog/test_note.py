"""Signed notes and checkpoints (`tms.tlog.note`): byte for byte what golang.org/x/mod/sumdb/note
writes (its documented example key and note), and a checkpoint signature that verifies with the
published key and fails with any other."""

from __future__ import annotations

import base64

import pytest

from tms.errors import LogError
from tms.tlog.merkle import EMPTY_ROOT
from tms.tlog.note import (
    DASH,
    Checkpoint,
    LogSigner,
    NoteSigner,
    NoteVerifier,
    log_origin,
    open_checkpoint,
    origin_slug,
    split_note,
)

# The example in golang.org/x/mod/sumdb/note's documentation, used as data.
GO_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VERIFIER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT + "\n— PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ROOT = bytes(range(32))


def test_the_go_example_byte_for_byte() -> None:
    signer = NoteSigner.parse(GO_SIGNER)
    assert signer.encode() == GO_SIGNER
    assert signer.verifier().encode() == GO_VERIFIER
    assert signer.sign(GO_TEXT) == GO_NOTE  # Ed25519 is deterministic
    assert NoteVerifier.parse(GO_VERIFIER).open(GO_NOTE) == GO_TEXT
    assert "AYEKF" not in repr(signer)


def test_a_checkpoint_verifies_with_the_published_key_and_no_other() -> None:
    log = LogSigner(NoteSigner.generate("tms.example.org"), "tms.example.org")
    note = log.sign("mcas", 5, ROOT)
    origin, size, root, blank, signature, end = note.split("\n")
    assert (origin, size, root, blank, end) == (
        "tms.example.org/c/mcas",
        "5",
        base64.b64encode(ROOT).decode(),
        "",
        "",
    )
    assert signature.startswith(f"{DASH} tms.example.org ")
    published = NoteVerifier.parse(log.key.verifier().encode())
    assert open_checkpoint(note, published) == Checkpoint("tms.example.org/c/mcas", 5, ROOT)

    others = [
        NoteSigner.generate("tms.example.org").verifier(),  # another key, same name
        NoteVerifier("tms.example.net", published.public),  # same key, another name
        NoteSigner.parse(GO_SIGNER).verifier(),
    ]
    for verifier in others:
        with pytest.raises(LogError, match="no signature by the key"):
            open_checkpoint(note, verifier)
    forged = note.replace("\n5\n", "\n6\n")
    with pytest.raises(LogError, match="does not verify"):
        open_checkpoint(forged, published)
    # Same key and name, a signature made over other text: refused, not skipped.
    spliced = forged[: forged.index(DASH)] + note[note.index(DASH) :]
    with pytest.raises(LogError, match="does not verify"):
        open_checkpoint(spliced, published)


def test_signatures_by_unknown_keys_are_ignored() -> None:
    """signed-note: verifiers ignore signatures from keys they do not know (witnesses)."""
    log = NoteSigner.generate("log.example")
    witness = NoteSigner.generate("witness.example")
    text = Checkpoint("log.example/c/x", 1, ROOT).text()
    both = log.sign(text) + witness.sign(text).split("\n\n", 1)[1]
    assert open_checkpoint(both, log.verifier()).size == 1
    assert open_checkpoint(both, witness.verifier()).size == 1


@pytest.mark.parametrize(
    "note",
    [
        "",
        "no newline",
        "text\n— a AAAA\n",  # no blank line
        "text\n\n— a !!!\n",  # not base64
        "text\n\n— a AAAA\n",  # too short
        "text\n\n- a AAAAAAAA\n",  # not an em dash
        "te\x01xt\n\n— a AAAAAAAA\n",  # a control character
        "text\n\n" + "— a AAAAAAAA\n" * 101,
        "x" * 70_000 + "\n\n— a AAAAAAAA\n",
    ],
)
def test_malformed_notes_are_refused(note: str) -> None:
    with pytest.raises(LogError):
        split_note(note)


@pytest.mark.parametrize(
    "text",
    [
        "origin\n5\n",  # two lines
        "origin\n05\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n-1\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n99999999999999999999\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n5\n" + base64.b64encode(ROOT[:31]).decode() + "\n",
        "origin\n5\n\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n5\n" + base64.b64encode(ROOT).decode(),  # no final newline
    ],
)
def test_malformed_checkpoints_are_refused(text: str) -> None:
    with pytest.raises(LogError):
        Checkpoint.parse(text)


def test_checkpoint_text_round_trips_and_ignores_extension_lines() -> None:
    checkpoint = Checkpoint("example.com/log", 0, EMPTY_ROOT)
    assert Checkpoint.parse(checkpoint.text()) == checkpoint
    assert Checkpoint.parse(checkpoint.text() + "ext\n") == checkpoint


@pytest.mark.parametrize(
    "text",
    [
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # wrong key ID
        "PeterNeumann+c74f20a3+AhpjZHJkc2FkYXNkYXNkYXNkYXNkYXNkYXNkYXNkYXNk",  # type 2
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "",
    ],
)
def test_malformed_verifier_keys_are_refused(text: str) -> None:
    with pytest.raises(LogError):
        NoteVerifier.parse(text)


@pytest.mark.parametrize(
    "text",
    [
        GO_SIGNER.replace("c74f20a3", "c74f20a4"),
        GO_SIGNER.replace("PRIVATE+KEY+", ""),
        "PRIVATE+KEY+a+00000000+AQ==",
    ],
)
def test_malformed_signer_keys_are_refused(text: str) -> None:
    with pytest.raises(LogError):
        NoteSigner.parse(text)


def test_origins_name_their_collection() -> None:
    assert log_origin("tms.example.org", "mcas") == "tms.example.org/c/mcas"
    assert origin_slug("tms.example.org/prefix/c/mcas") == "mcas"
    assert origin_slug("tms.example.org/c/Not-A-Slug") is None
    assert origin_slug("example.com/log") is None
