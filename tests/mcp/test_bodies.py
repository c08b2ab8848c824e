"""What `/mcp` does with bodies before any tool runs: sizes, shapes and malformed JSON-RPC get
clean JSON-RPC errors in plain words, big bodies are for publish only, and a client that hangs
up mid-body is one log line."""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest
from factories import request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_helpers import HEADERS, Caller

from tms.mcp.http import MAX_BODY, SMALL_BODY
from tms.nostr.events import SecretKey

FIXTURES = [HealthCheck.function_scoped_fixture]


def post(caller: Caller, body: bytes, **headers: str) -> tuple[int, Any]:
    response = caller.http.post(
        caller.live.mcp,
        content=body,
        headers={**HEADERS, "Content-Type": "application/json", **headers},
    )
    return response.status_code, response.json() if response.content else None


def rpc_error(reply: Any) -> str:
    """A JSON-RPC error answer's message, after checking it is one and reads cleanly."""
    assert reply["jsonrpc"] == "2.0" and set(reply) == {"jsonrpc", "id", "error"}, reply
    message: str = reply["error"]["message"]
    assert isinstance(reply["error"]["code"], int)
    for internals in ("pydantic", "https://", "Traceback", "input_value", "type="):
        assert internals not in message, message
    return message


def test_a_body_over_64_mib_is_a_413_json_rpc_error_without_being_read(caller: Caller) -> None:
    with socket.create_connection(("127.0.0.1", int(caller.live.url.rsplit(":", 1)[1]))) as s:
        s.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Accept: application/json\r\nContent-Length: "
            + str(MAX_BODY + 1).encode()
            + b"\r\n\r\n"
        )
        answer = b""
        while b"more than 64 MiB" not in answer and (chunk := s.recv(65536)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head
    assert "more than 64 MiB" in rpc_error(json.loads(body))


def test_only_publish_takes_a_body_over_one_mib(caller: Caller) -> None:
    key = SecretKey.generate()
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "list_claims", "arguments": {"request": request(key, "list_claims")}},
        "padding": "x" * SMALL_BODY,
    }
    status, reply = post(caller, json.dumps(call).encode())
    assert status == 413
    assert "only publish takes more than 1 MiB" in rpc_error(reply)


def test_a_body_shaped_to_be_costly_is_refused_before_it_is_built(caller: Caller) -> None:
    """Empty lists or numbers by the million: cheap to send, dear to build. Small (read here) or
    big (read by a worker process), the answer is a parse error naming the limit, and the server
    goes on answering."""
    head = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":['
    cases = [
        (b"[]," * 100_000, "more than 50,000 arrays and objects"),  # 300 KB
        (b"[]," * 400_000, "more than 50,000 arrays and objects"),  # 1.2 MB: a worker
        (b"[]," * 3_000_000, "more than 1,000,000 '[' and '{' characters"),  # cut while read
        (b"1," * 4_000_000, "more than 500,000 values"),  # 8 MB of numbers: a worker
    ]
    for items, words in cases:
        status, reply = post(caller, head + items + b"[]]}")
        assert status == 400
        assert words in rpc_error(reply)
    assert caller.rpc("tools/list")["tools"]


def test_duplicate_keys_are_refused(caller: Caller) -> None:
    """One signed text never reads two ways: a body whose object repeats a key is refused
    before the SDK could keep one of them."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}'
    status, reply = post(caller, body)
    assert status == 400
    assert rpc_error(reply) == "Parse error: duplicate key 'method'"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"garbage", "Parse error"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[]", "one JSON-RPC message per POST"),
        (b"42", "a JSON object"),
        (b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', "'jsonrpc' must be"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', "'id' must be"),
        (b'{"jsonrpc":"2.0","id":1}', "'method' is missing"),
        (b'{"jsonrpc":"2.0","id":1,"method":5}', "'method' must be a string"),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}', "'params' must be"),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}', "'name'"),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":1}}',
            "'arguments' must be an object",
        ),
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}', "'protocolVersion'"),
    ],
)
def test_malformed_messages_get_clean_json_rpc_errors(
    caller: Caller, body: bytes, words: str
) -> None:
    status, reply = post(caller, body)
    assert status == 400
    assert words in rpc_error(reply)


JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.one_of(st.just("2.0"), JSON),
        "id": JSON,
        "method": st.one_of(
            st.sampled_from(["tools/call", "tools/list", "prompts/get", "initialize", "ping"]),
            JSON,
        ),
        "params": JSON,
        "result": JSON,
        "error": JSON,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURES)
@given(message=st.one_of(MESSAGES, JSON))
def test_any_json_body_gets_an_answer_in_plain_words(caller: Caller, message: Any) -> None:
    status, reply = post(caller, json.dumps(message).encode())
    assert status in (200, 202, 400), (status, reply)
    if status == 400:
        rpc_error(reply)
    elif reply is not None and "error" in reply:
        assert isinstance(reply["error"]["message"], str)


def test_a_client_hanging_up_mid_body_is_one_log_line(
    caller: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    port = int(caller.live.url.rsplit(":", 1)[1])
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(
                    b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Accept: application/json\r\nContent-Length: 1000\r\n\r\n" + b"{" * 10
                )
        caller.rpc("tools/list")  # the server is fine, and has logged by now
    hung_up = [r for r in caplog.records if "hung up before sending its whole body" in r.message]
    assert len(hung_up) == 3
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
