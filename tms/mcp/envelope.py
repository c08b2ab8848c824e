"""What a JSON-RPC request body holds, checked before the MCP SDK reads it.

The SDK parses a whole body on the event loop before anything can look at its size or shape, and
answers malformed input with pydantic's own dumps. So `/mcp` reads every body here first: JSON
whose cost is bounded by its shape as well as its size (`loads_bounded`), no duplicate keys (one
signed text never reads two ways), a JSON-RPC 2.0 message, and the parameters of the methods
TMS serves in their expected types. Only then does the SDK parse the same bytes again, cheaply.

Pure, and light to import: big bodies are inspected in a worker process (`tms.mcp.http`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tms.errors import shown
from tms.nostr.events import loads_bounded

# A JSON-RPC error code (https://www.jsonrpc.org/specification#error_object) and its message.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602

# A 1,000-event batch is about 2,000 arrays and objects and 20,000 values; a proof travels as a
# string inside its request, so no body needs more than these.
MAX_CONTAINERS: Final = 50_000
MAX_VALUES: Final = 500_000


class BadMessage(Exception):
    """A body that is not a message TMS serves. Its arguments are all passed up, so that it
    travels back from a worker process (pickled) intact."""

    def __init__(self, code: int, message: str, request_id: str | int | None = None) -> None:
        super().__init__(code, message, request_id)
        self.code = code
        self.message = message
        self.request_id = request_id

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class Summary:
    """What the door needs of a message before handing it on."""

    method: str | None  # None: a response or error from the client
    tool: str | None  # the tool named by a tools/call
    is_request: bool  # has an id: the client waits for an answer


def inspect(body: bytes | str) -> Summary:
    """The message's summary, or `BadMessage` saying in plain words what is wrong with it."""
    try:
        message = loads_bounded(body, max_containers=MAX_CONTAINERS, max_values=MAX_VALUES)
    except UnicodeDecodeError:
        raise BadMessage(PARSE_ERROR, "Parse error: the body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise BadMessage(PARSE_ERROR, f"Parse error: {shown(exc, 200)}") from None
    if isinstance(message, list):
        raise BadMessage(INVALID_REQUEST, "Invalid Request: send one JSON-RPC message per POST")
    if not isinstance(message, dict):
        raise BadMessage(INVALID_REQUEST, "Invalid Request: a JSON-RPC message is a JSON object")
    request_id = message.get("id")
    if "id" in message and (isinstance(request_id, bool) or not isinstance(request_id, str | int)):
        raise BadMessage(INVALID_REQUEST, "Invalid Request: 'id' must be a string or an integer")
    if message.get("jsonrpc") != "2.0":
        raise BadMessage(INVALID_REQUEST, "Invalid Request: 'jsonrpc' must be \"2.0\"", request_id)
    if "method" not in message:
        if "id" in message and ("result" in message or "error" in message):
            _check_answer(message, request_id)
            return Summary(None, None, False)  # a client's answer: the SDK takes it as it is
        raise BadMessage(INVALID_REQUEST, "Invalid Request: 'method' is missing", request_id)
    method = message["method"]
    if not isinstance(method, str):
        raise BadMessage(INVALID_REQUEST, "Invalid Request: 'method' must be a string", request_id)
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        raise BadMessage(INVALID_REQUEST, "Invalid Request: 'params' must be an object", request_id)
    tool = _check_params(method, params or {}, request_id)
    return Summary(method, tool, "id" in message)


def _check_answer(message: dict[str, Any], request_id: str | int | None) -> None:
    """A response or error from the client has the shape the SDK's models need, so a bad one is
    refused here in plain words rather than in the SDK's validation report."""
    if "result" in message:
        if not isinstance(message["result"], dict):
            raise BadMessage(
                INVALID_REQUEST, "Invalid Request: 'result' must be an object", request_id
            )
        return
    error = message["error"]
    if not (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error.get("code"), bool)
        and isinstance(error.get("message"), str)
    ):
        raise BadMessage(
            INVALID_REQUEST,
            "Invalid Request: 'error' must be an object with an integer 'code' and a string "
            "'message'",
            request_id,
        )


def inspect_file(path: Path) -> Summary:
    """`inspect` for a big body handed over in a file (in a worker process): read straight into
    text, with no copy of the bytes."""
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError:
        raise BadMessage(PARSE_ERROR, "Parse error: the body is not UTF-8") from None
    return inspect(text)


def _check_params(method: str, params: dict[str, Any], request_id: str | int | None) -> str | None:
    def bad(problem: str) -> BadMessage:
        return BadMessage(
            INVALID_PARAMS, f"Invalid params for {shown(method)}: {problem}", request_id
        )

    if method in ("tools/call", "prompts/get"):
        name = params.get("name")
        if not isinstance(name, str):
            raise bad("'name' must be a string")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise bad("'arguments' must be an object")
        strings = arguments is None or all(isinstance(v, str) for v in arguments.values())
        if method == "prompts/get" and not strings:
            raise bad("every argument of a prompt is a string")
        return name if method == "tools/call" else None
    if method in ("tools/list", "prompts/list", "resources/list"):
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise bad("'cursor' must be a string")
    if method == "initialize":
        if not isinstance(params.get("protocolVersion"), str):
            raise bad("'protocolVersion' must be a string")
        if not isinstance(params.get("capabilities", {}), dict):
            raise bad("'capabilities' must be an object")
        if not isinstance(params.get("clientInfo"), dict):
            raise bad("'clientInfo' must be an object with 'name' and 'version'")
    return None
