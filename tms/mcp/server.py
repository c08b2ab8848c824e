"""The MCP front door: the tool table and the prompts served with the official SDK's low-level
server, over streamable HTTP (stateless, JSON responses) at `/mcp`, or over stdio.

The low-level server rather than `MCPServer`'s decorators: arguments arrive signed inside a
`request` and are validated by `tms.mcp.tools` with SPEC's messages, so the schemas are written
from our models and every failure is an `isError` result carrying exactly our message.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from tms.errors import Outcome, one_line, outcome_of, sendable, told
from tms.mcp.http import MAX_BODY
from tms.mcp.prompts import PROMPTS, Prompt
from tms.mcp.schemas import output_schema
from tms.mcp.tools import Tool, Tools
from tms.metrics import TOOL_CALLS, TOOL_OUTCOMES

log = logging.getLogger("tms.mcp")


INSTRUCTIONS: Final = (
    "TMS is a private, append-only evidence ledger. Every record is a Nostr event signed by its "
    "author. `publish` takes signed events; every other tool takes one signed kind 4707 "
    '`request` whose content is {"tool": ..., "args": {...}}. Start with list_collections; '
    "the prompts claims_pass and briefing describe the two usual workflows."
)


def build_server(tools: Tools, prompts: Mapping[str, Prompt] = PROMPTS) -> Server[Any]:
    """The low-level MCP server for these bound tools (their registry, as it stands now: the
    core's, with the enabled plugins' tools) and these prompts (likewise). With a signer (stdio
    and TMS_NSEC), the schemas offer the tool's arguments directly and `request` becomes
    optional."""
    listed = [_listing(tool, direct=tools.signer is not None) for tool in tools.tools.values()]
    for name in (*tools.tools, "unknown"):  # every series from zero, the plugins' tools too
        for outcome in TOOL_OUTCOMES:
            TOOL_CALLS.labels(name, outcome)

    def _count(name: str, outcome: Outcome) -> None:
        """A tool call in `tms_tool_calls_total`: names no tool has are counted as one."""
        TOOL_CALLS.labels(name if name in tools.tools else "unknown", outcome).inc()

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await tools.call(params.name, params.arguments or {})
        except Exception as exc:  # classified once (tms.errors); said as this door says it
            outcome = outcome_of(exc)
            _count(params.name, outcome)
            if outcome is Outcome.UNAVAILABLE:
                tools.services.outage.failed(f"the tool {params.name}", exc)
            elif outcome is Outcome.INTERNAL:  # a bug: details for the log only
                log.error("tool %s failed", params.name, exc_info=exc)
                return _error(f"{told(exc)}; the server's log has the details")
            return _error(told(exc))
        _count(params.name, Outcome.OK)
        text = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=result
        )

    async def list_prompts(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=name,
                    description=prompt.description,
                    arguments=[
                        types.PromptArgument(
                            name=argument.name,
                            description=argument.description,
                            required=argument.required,
                        )
                        for argument in prompt.arguments
                    ],
                )
                for name, prompt in prompts.items()
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        prompt = prompts.get(params.name)
        if prompt is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown prompt '{params.name[:64]}'; prompts/list names them",
            )
        try:
            text = prompt.render(params.arguments or {})
        except ValueError as exc:  # an argument missing or not what the prompt takes
            raise MCPError(types.INVALID_PARAMS, sendable(one_line(exc, 500))) from None
        except Exception as exc:  # a plugin's prompt that failed: details for the log only
            log.error("prompt %s failed", params.name, exc_info=exc)
            raise MCPError(
                types.INTERNAL_ERROR,
                f"prompt '{params.name}' failed; the server's log has the details",
            ) from None
        return types.GetPromptResult(
            description=prompt.description,
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )

    server = Server(
        "tms",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    # The SDK opens an OpenTelemetry span for every message; TMS configures no tracer, so each
    # would be a no-op that still costs a tenth of a request's time on the event loop.
    server.middleware = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    return server


def http_endpoint(server: Server[Any]) -> tuple[ASGIApp, StreamableHTTPSessionManager]:
    """The ASGI app for `/mcp` and its session manager, whose `run()` the parent app's
    lifespan must enter. Stateless with JSON responses: any POST stands alone, no session or
    initialize step. No DNS-rebinding host check: nothing here rides on ambient credentials
    (no cookies, no tokens), every call carries its own signature.

    The app goes to the manager's request handler past its body-size middleware: `tms.mcp.http`
    has read, bounded and checked the body already, and that middleware would copy all of it
    twice more on the event loop (about 50 ms and 120 MB for the largest publish)."""
    manager = StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True, max_request_body_size=MAX_BODY
    )

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await manager._handle_request(scope, receive, send)

    return endpoint, manager


def _listing(tool: Tool[Any, BaseModel], *, direct: bool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=_input_schema(tool, direct=direct),
        output_schema=output_schema(tool.name, tool.result, wrapped=tool.wrapped),
    )


def _input_schema(tool: Tool[Any, BaseModel], *, direct: bool) -> dict[str, Any]:
    if not tool.signed:
        return tool.args.model_json_schema(by_alias=True)
    described = (
        _describe_args(tool.args) if tool.checked is None else _describe_schema(tool.checked.schema)
    )
    request = {
        "type": "object",
        "description": (
            f'A kind 4707 event you signed (NIP-01 envelope) whose content is {{"tool": '
            f'"{tool.name}", "args": {{...}}}}, created within 60 s of the server clock; each '
            f"request works once. args: {described}"
        ),
    }
    if not direct:
        return {
            "type": "object",
            "properties": {"request": request},
            "required": ["request"],
            "additionalProperties": False,
        }
    schema = (
        tool.args.model_json_schema(by_alias=True)
        if tool.checked is None
        else copy.deepcopy(dict(tool.checked.schema))
    )
    schema.setdefault("properties", {})["request"] = {
        **request,
        "description": "Optional here: without it the call is signed with TMS_NSEC. "
        + request["description"],
    }
    return schema


def _describe_args(model: type[BaseModel]) -> str:
    if not model.model_fields:
        return "none ({})."
    parts = []
    for name, field in model.model_fields.items():
        wanted = "required" if field.is_required() else "optional"
        parts.append(f"`{field.alias or name}` ({wanted}) {field.description or ''}".strip())
    return "; ".join(parts)


def _describe_schema(schema: Mapping[str, Any]) -> str:
    """A plugin tool's arguments, from its JSON Schema, as `_describe_args` says the core's."""
    properties = schema.get("properties") or {}
    if not properties:
        return "none ({})."
    required = set(schema.get("required") or ())
    parts = []
    for name, field in properties.items():
        wanted = "required" if name in required else "optional"
        about = field.get("description", "") if isinstance(field, Mapping) else ""
        parts.append(f"`{name}` ({wanted}) {about}".strip())
    return "; ".join(parts)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=sendable(message))], is_error=True
    )


def _version() -> str:
    from importlib.metadata import version

    return version("tms")
