"""The core's values as the extension surface says them: where the machinery hands a plugin
something, it hands the surface's own class (`tms.extension`), made here from the core's.

The surface keeps its own `Door`, `Origin`, `Read` and `Committed` so that the core may add or
move a field without changing a plugin's promise; these functions are the one place that knows
both. They read by value (a door by its name, an origin by its three fields); a value that already
is the surface's (a test or a benchmark building a `Read` to drive the filters) is handed on
as it is.
Pure: nothing here touches the database or a door.
"""

from __future__ import annotations

from tms.extension import Action, Committed, Door, Origin, Read
from tms.rules import admission


def origin_seen(origin: admission.Origin | Origin) -> Origin:
    """Who sent a batch, as a write policy or a hook is told it."""
    if isinstance(origin, Origin):
        return origin
    return Origin(Door(origin.door.value), origin.pubkey, origin.address)


def read_seen(read: admission.Read | Read) -> Read:
    """A read, as a read filter is asked about it."""
    if isinstance(read, Read):
        return read
    return Read(origin_seen(read.origin), read.collection, read.filters, read.tool)


def committed_seen(committed: admission.Committed | Committed) -> Committed:
    """A committed batch, as an after-commit hook is told it."""
    if isinstance(committed, Committed):
        return committed
    return Committed(committed.ids, committed.collections, origin_seen(committed.origin))


def core_action(action: Action) -> admission.Action:
    """A policy's answer, as the ledger's `Decision` carries it."""
    return admission.Action(action.value)
