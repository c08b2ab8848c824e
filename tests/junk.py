"""Junk batches for the publish tests: what a confused or hostile client might send."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from factories import NOW, OWNER, STRANGER, TERMS
from hypothesis import strategies as st

from tms.nostr.events import FIELDS, SecretKey

PLAUSIBLE_STRINGS: Final = [
    "lab",
    "other",
    "Lab",
    "",
    " ",
    "SUPPORTS",
    "QUALIFIES",
    "REBUTS",
    "1",
    TERMS["sha256"],
    OWNER.pubkey,
    STRANGER.pubkey,
    "f" * 64,
    "reduced diamine oxidase",
]
CONTENT_KEYS: Final = [
    "collection",
    "text",
    "url",
    "title",
    "source",
    "from",
    "to",
    "relation",
    "quote",
    "reason",
    "claims",
    "members",
    "version",
    "sha256",
    "name",
    "about",
    "picture",
    "tool",
    "args",
]


def _json_values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats()
        | text
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8,
    )


def junk_strategies(known_ids: Sequence[str] = ()) -> st.SearchStrategy[object]:
    """Junk JSON: non-lists, lists of junk, signed events with random kinds, content and tags
    (by OWNER or STRANGER), some with one envelope field spoiled. Strings hold anything, NUL and
    lone surrogates included (raw where the envelope allows it, escaped inside signed content),
    or plausible values: slugs, relations, keys, the terms' hash, `known_ids`."""
    signable = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
        [*PLAUSIBLE_STRINGS, *known_ids]
    )
    anything = st.text(max_size=12) | signable
    values = _json_values(anything)
    signable_values = _json_values(signable)
    content_dicts = st.dictionaries(
        st.sampled_from(CONTENT_KEYS) | signable, signable_values, max_size=6
    )
    contents = (
        content_dicts.map(lambda obj: json.dumps(obj, ensure_ascii=False))
        | content_dicts.map(json.dumps)
        | st.dictionaries(signable, values, max_size=3).map(json.dumps)  # escaped surrogates
        | signable
    )
    signers = st.sampled_from([OWNER, STRANGER])

    @st.composite
    def signed_events(draw: st.DrawFn) -> object:
        signer: SecretKey = draw(signers)
        kind = draw(st.sampled_from([0, 4701, 4702, 4703, 4704, 4705, 4706, 4707, 1]))
        content = draw(contents)
        tags = draw(st.just([]) | st.lists(st.lists(signable, max_size=2), max_size=2))
        created_at = draw(st.integers(min_value=0, max_value=NOW + 2000))
        event = signer.sign(kind, content, created_at, tags).to_dict()
        if draw(st.booleans()):  # spoil one envelope field
            name = draw(st.sampled_from(FIELDS))
            if draw(st.booleans()):
                event[name] = draw(values)
            else:
                del event[name]
        return event

    event_like = st.dictionaries(st.sampled_from(FIELDS) | anything, values, max_size=8)
    items = signed_events() | event_like | values
    return (
        values.filter(lambda v: not isinstance(v, list))
        | st.lists(items, max_size=5)
        | st.lists(signed_events(), min_size=1, max_size=4)
    )
