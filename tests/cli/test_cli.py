"""`tms-sign` and `tms verify` as a user runs them: real processes, real output, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from factories import BIN, environment, key

from tms.cli import sign as sign_cli
from tms.cli.parser import build_parser
from tms.nostr import nip19
from tms.nostr.events import Event, SecretKey
from tms.rules.kinds import validate_content

KEY = key(0x6E)
NSEC = nip19.nsec_encode(KEY.secret)


def run(
    *args: str, nsec: str | None = NSEC, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = environment() if nsec is None else environment(TMS_NSEC=nsec)
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_keygen_prints_a_usable_key() -> None:
    result = run("tms-sign", "keygen", nsec=None)
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert set(values) == {"TMS_NSEC", "BOT_SECRET_HEX", "NPUB", "PUBKEY_HEX"}
    made = SecretKey(bytes.fromhex(values["BOT_SECRET_HEX"]))
    assert nip19.nsec_decode(values["TMS_NSEC"]) == made.secret
    assert nip19.npub_decode(values["NPUB"]) == made.pubkey == values["PUBKEY_HEX"]


@pytest.mark.parametrize("nsec", [NSEC, KEY.secret.hex()])
def test_pubkey_reads_nsec_or_hex(nsec: str) -> None:
    result = run("tms-sign", "pubkey", nsec=nsec)
    assert result.stdout.splitlines() == [
        f"NPUB={nip19.npub_encode(KEY.pubkey)}",
        f"PUBKEY_HEX={KEY.pubkey}",
    ]


def test_event_prints_one_signed_line() -> None:
    before = int(time.time())
    result = run("tms-sign", "event", "4702", '{"collection": "mcas", "text": "A claim."}')
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1
    event = Event.from_json(result.stdout)
    event.verify()
    assert event.pubkey == KEY.pubkey
    assert event.kind == 4702
    assert event.content == '{"collection":"mcas","text":"A claim."}'
    assert before <= event.created_at <= int(time.time())
    validate_content(event)


def test_unicode_content_is_signed_as_written() -> None:
    result = run(
        "tms-sign", "event", "4702", '{"collection": "mcas", "text": "Ünïcode 🧪 “quoted”"}'
    )
    event = Event.from_json(result.stdout)
    event.verify()
    assert json.loads(event.content)["text"] == "Ünïcode 🧪 “quoted”"


def test_request_wraps_tool_and_args() -> None:
    result = run("tms-sign", "request", "search_claims", '{"collection": "mcas", "text": "DAO"}')
    event = Event.from_json(result.stdout)
    event.verify()
    assert event.kind == 4707
    assert json.loads(event.content) == {
        "tool": "search_claims",
        "args": {"collection": "mcas", "text": "DAO"},
    }
    bare = Event.from_json(run("tms-sign", "request", "list_collections").stdout)
    assert json.loads(bare.content) == {"tool": "list_collections", "args": {}}


@pytest.mark.parametrize(
    ("args", "nsec", "words"),
    [
        (("event", "4702", '{"collection": "mcas"}'), NSEC, "field 'text' is missing"),
        (("event", "4702", '{"collection": "mcas", "text": "x", "y": 1}'), NSEC, "unknown fields"),
        (("event", "4702", "{not json"), NSEC, "content is not valid JSON"),
        (("event", "4702", "[1]"), NSEC, "content must be a JSON object"),
        (("event", "claim", "{}"), NSEC, "KIND must be an integer"),
        (("event", "1", '{"a": 1}'), NSEC, "field 'kind' is invalid"),
        (("event", "4707", '{"tool": "x", "args": {}}'), NSEC, "tms-sign request"),
        (("event", "4702"), NSEC, "required"),
        (("request", "list_collections", "[]"), NSEC, "args must be a JSON object"),
        (("sing",), NSEC, "invalid choice"),
        (("pubkey",), None, "TMS_NSEC is not set"),
        (("pubkey",), "nsec1qqqq", "bech32"),
        (("pubkey",), NSEC[:-1] + "q", "checksum"),
        (("pubkey",), "0" * 64, "not a valid secp256k1"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(
    args: tuple[str, ...], nsec: str | None, words: str
) -> None:
    result = run("tms-sign", *args, nsec=nsec)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("tms-sign: ")
    assert words in result.stderr
    assert KEY.secret.hex() not in result.stderr


def test_verify_accepts_a_good_file_and_reports_each_bad_line(tmp_path: Path) -> None:
    good = [
        run("tms-sign", "event", "4702", json.dumps({"collection": "m", "text": t})).stdout
        for t in ("one", "two")
    ]
    tampered = good[0].replace("one", "uno")
    path = tmp_path / "export.jsonl"
    path.write_text("".join(good))
    ok = run("tms", "verify", str(path))
    assert (ok.returncode, ok.stdout) == (0, "2 events verified, 0 invalid\n")

    path.write_text(good[0] + tampered + "\n" + '{"id": 1}\n')
    bad = run("tms", "verify", str(path))
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [
        "line 2: id does not match the sha256 of the serialized event "
        "(was content re-serialized after signing?)",
        "line 4: field 'pubkey' is missing",
        "1 events verified, 2 invalid",
    ]
    piped = run("tms", "verify", "-", stdin="".join(good))
    assert piped.returncode == 0


def test_verify_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run("tms", "verify", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr


# --- every subcommand's --help says what it does ------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_tms_subcommand_help_has_a_description() -> None:
    commands = _subcommands(build_parser())
    assert {"approve", "revoke", "stdio", "collections", "verify-export"} <= set(commands)
    for name, sub in commands.items():
        help_text = sub.format_help()
        description = help_text.split("\n\n")[1]
        assert not description.startswith(("positional arguments", "options")), name
        assert len(description.split()) >= 5, (name, description)


@pytest.mark.parametrize(
    ("program", "command", "words"),
    [
        ("tms", "approve", "Approve keys: they may log in"),
        ("tms", "revoke", "Withdraw approvals."),
        ("tms", "stdio", "Serve the MCP tools over stdin/stdout"),
        ("tms", "collections", "List every collection"),
        ("tms-sign", "keygen", "Make a new key"),
        ("tms-sign", "request", "A kind 4707 request"),
    ],
)
def test_subcommand_help_as_a_user_sees_it(program: str, command: str, words: str) -> None:
    result = run(program, command, "--help", nsec=None)
    assert result.returncode == 0, result.stderr
    assert words in " ".join(result.stdout.split())


def test_tms_sign_subcommands_have_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in ("keygen", "pubkey", "event", "request"):
        with pytest.raises(SystemExit):
            sign_cli.run([verb, "--help"])
        description = capsys.readouterr().out.split("\n\n")[1]
        assert not description.startswith(("positional arguments", "options")), verb


def _stdio_start(nsec: str | None) -> str:
    """`tms stdio` started as an MCP client starts it: the first line it says on stderr (then
    it is stopped). A database nobody listens on: this is said before the database is opened."""
    env = environment(TMS_DATABASE_URL="postgresql://tms@127.0.0.1:9/none", TMS_EMBED="off")
    if nsec is not None:
        env["TMS_NSEC"] = nsec
    process = subprocess.Popen(
        [str(BIN / "tms"), "stdio"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    assert process.stderr is not None
    reader = threading.Thread(target=lambda: said.append(process.stderr.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(60)  # a process that says nothing fails the test, never hangs it
    process.kill()
    process.communicate(timeout=30)
    reader.join(30)
    return said[0] if said else ""


def test_tms_stdio_says_what_tms_nsec_does() -> None:
    said = _stdio_start(None)
    assert said.startswith("tms stdio: TMS_NSEC is not set, so no call is signed for you")
    assert "set TMS_NSEC to its nsec or 64 hex characters" in said
    said = _stdio_start(NSEC)
    npub = nip19.npub_encode(KEY.pubkey)
    assert said.strip() == f"tms stdio: signing tool calls as {npub} (TMS_NSEC)."
    said = _stdio_start("nsec1notakey")
    assert said.startswith("tms: TMS_NSEC: ")
    assert "unset it to serve without a key" in said
    assert "nsec1notakey" not in said  # never the secret itself
