"""A plugin's tools and prompts as entries of the core's own registries (`tms.mcp.tools.TOOLS`,
`tms.mcp.prompts.PROMPTS`), so that MCP lists and calls them as it does the core's.

A plugin's tool becomes a core `Tool`: its arguments are checked by its JSON Schema (`Checked`)
before anything else, then it is called through the same signed kind 4707 request, single use,
rate limit and access check (`reads`: the collection its `collection` argument names, every
collection the key may read, or only the key) as every core tool but `publish`; its handler gets
the `Caller` that check made. A plugin's prompt becomes a core `Prompt` with its own arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

from tms.extension import Caller
from tms.ledger.access import ReadableCollection, Reader
from tms.mcp.prompts import Prompt, PromptArgument
from tms.mcp.tools import EVERY_COLLECTION, ONE_COLLECTION, THE_KEY, Tool
from tms.plugins.registry import PluginPrompt, PluginTool
from tms.services import Services
from tms.types import PubKey


class PluginArgs(BaseModel):
    """A plugin tool's arguments, as its own JSON Schema passed them: any fields (`given`);
    `collection`, when the schema has one, is what the access check reads."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def given(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


class PluginResult(TypedDict, total=False):
    """A plugin tool's structured result: an object, whatever its fields (its handler's object,
    or `{"result": ...}` around anything else)."""


def _result(value: Any) -> dict[str, Any]:
    """What the handler returned as the tool's structured result (a `PluginResult`)."""
    return value if isinstance(value, dict) else {"result": value}


def as_tool(tool: PluginTool) -> Tool[Any, PluginArgs]:
    """The core's `Tool` for a plugin's: what it `reads` checked by the access module before
    its handler runs, and named in the `Caller` it is handed."""
    description, checked = tool.tool.description, tool
    if tool.tool.reads == "collection":

        async def one(services: Services, readable: ReadableCollection, args: PluginArgs) -> Any:
            caller = Caller(readable.pubkey, (readable.slug,))
            return _result(await tool.run(caller, args.given()))

        return Tool(
            tool.name, description, PluginArgs, PluginResult, one, ONE_COLLECTION, checked=checked
        )
    if tool.tool.reads == "all":

        async def every(services: Services, reader: Reader, args: PluginArgs) -> Any:
            return _result(await tool.run(Caller(reader.pubkey, reader.slugs), args.given()))

        return Tool(
            tool.name,
            description,
            PluginArgs,
            PluginResult,
            every,
            EVERY_COLLECTION,
            checked=checked,
        )

    async def key(services: Services, pubkey: PubKey, args: PluginArgs) -> Any:
        return _result(await tool.run(Caller(pubkey), args.given()))

    return Tool(tool.name, description, PluginArgs, PluginResult, key, THE_KEY, checked=checked)


def as_prompt(prompt: PluginPrompt) -> Prompt:
    arguments = tuple(
        PromptArgument(argument.name, argument.description, argument.required)
        for argument in prompt.prompt.arguments
    )

    def render(given: Mapping[str, str]) -> str:
        return prompt.render(given)

    return Prompt(prompt.prompt.description, arguments, render)
