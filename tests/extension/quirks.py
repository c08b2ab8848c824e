"""`quirks`: a plugin the live tests install as a package of its own (a distribution on the
server's PYTHONPATH declaring it in `tms.plugins`) and enable by TMS_PLUGINS, filling every seam
with something a test can see. Like any plugin, it imports `tms.extension` alone.

- write policy: a claim whose text holds `hush` is shadow-rejected; one holding `explode` makes
  the policy raise (the server rejects it cleanly and counts the failure);
- read filter: every read of the collection `sealed` is refused;
- tools: `quirks_echo` (reads the collection it names: answers who called and what the core let
  it read), `quirks_whoami` (reads nothing);
- a prompt, `quirks_review`, taking a `topic`;
- routes: `/plugins/quirks/hello` (anyone), `/plugins/quirks/me` (NIP-98).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tms.extension import (
    ACCEPT,
    SHADOW_REJECT,
    Auth,
    Caller,
    Event,
    Origin,
    Plugin,
    Prompt,
    PromptArgument,
    Read,
    Refused,
    Route,
    Tool,
    Verdict,
)

SEALED = "sealed"


async def policy(event: Event, origin: Origin) -> Verdict:
    if event.kind == 4702:
        text = str(event.fields().get("text", ""))
        if "explode" in text:
            raise RuntimeError("the quirks policy blew up (on purpose)")
        if "hush" in text:
            return SHADOW_REJECT
    return ACCEPT


async def read_filter(read: Read) -> str | None:
    if read.collection == SEALED:
        return f"collection '{SEALED}' is sealed by the quirks plugin"
    return None


async def echo(caller: Caller, args: dict[str, Any]) -> Any:
    if args.get("say") == "no":
        raise Refused("quirks_echo will not say no")
    return {"caller": caller.pubkey, "collections": list(caller.collections), "args": args}


async def whoami(caller: Caller, args: dict[str, Any]) -> Any:
    return caller.pubkey  # not an object: arrives as {"result": ...}


async def hello(request: Request, pubkey: str | None) -> Response:
    return JSONResponse({"hello": "world", "pubkey": pubkey})


def review(arguments: Mapping[str, str]) -> str:
    return f"Review the claims about {arguments['topic']}."


ECHO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "collection": {"type": "string", "description": "the collection's slug"},
        "say": {"type": "string", "maxLength": 20},
    },
    "required": ["collection"],
    "additionalProperties": False,
}


def plugin(environ: Mapping[str, str]) -> Plugin:
    return Plugin(
        "quirks",
        write_policy=policy,
        read_filter=read_filter,
        tools=[
            Tool("quirks_echo", "Says who called, and what it may read.", ECHO_SCHEMA, echo),
            Tool("quirks_whoami", "Says who called.", {"type": "object"}, whoami, reads=None),
        ],
        prompts=[
            Prompt(
                "quirks_review",
                "Review a topic's claims.",
                review,
                (PromptArgument("topic", "what to review"),),
            )
        ],
        routes=[Route("/hello", hello), Route("/me", hello, auth=Auth.NIP98)],
    )
