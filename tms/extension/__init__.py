"""TMS's extension surface: what a plugin may use, and all of it.

Only the names in `__all__` are public, and `API_VERSION` is the promise on them (semantic
versioning, docs/extending.md): a minor version adds (a field with a default, a type, a seam), a
major version may change or remove. Every other module under `tms`, this package's submodules
included, may change in any release; a plugin imports from `tms.extension` alone (the example
plugins' test holds them to it).

A plugin is a `Plugin` value, declared by an installed package in the `tms.plugins` entry point
group (the value itself, or a `PluginFactory` called with the environment) and enabled by name in
`TMS_PLUGINS`. What the core does with it lives below this package, in `tms.plugins` (the
loader, the seams' runners, the strfry adapter), which translates the core's values into this
surface's own vocabulary: nothing here is a core class, and this package imports nothing of TMS.
`tests/extension/surface.snapshot` holds every public name's signature, so that a change to the
promise is seen (and its `API_VERSION` decided) in review.
"""

from typing import Final

from tms.extension.api import (
    ACCEPT,
    SHADOW_REJECT,
    Action,
    AfterCommit,
    Auth,
    Caller,
    Committed,
    Door,
    Event,
    Origin,
    Plugin,
    PluginError,
    PluginFactory,
    Prompt,
    PromptArgument,
    Read,
    ReadFilter,
    Refused,
    Route,
    RouteHandler,
    Tool,
    ToolHandler,
    Verdict,
    WritePolicy,
    reject,
)

API_VERSION: Final = "1.0.0"

__all__ = [
    "ACCEPT",
    "API_VERSION",
    "SHADOW_REJECT",
    "Action",
    "AfterCommit",
    "Auth",
    "Caller",
    "Committed",
    "Door",
    "Event",
    "Origin",
    "Plugin",
    "PluginError",
    "PluginFactory",
    "Prompt",
    "PromptArgument",
    "Read",
    "ReadFilter",
    "Refused",
    "Route",
    "RouteHandler",
    "Tool",
    "ToolHandler",
    "Verdict",
    "WritePolicy",
    "reject",
]
