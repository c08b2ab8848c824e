"""`Snapshot.copy`: a group's trial copy shares nothing the judge changes with the snapshot it
came from, so a refused batch leaves the next batch's snapshot as it was."""

from __future__ import annotations

import dataclasses

from tms.rules.publish import Ref, Snapshot


def test_a_copy_shares_no_container() -> None:
    original = Snapshot(
        stored_ids={"a"},
        approved={"k"},
        terms_signed={"k"},
        belongs_to={"k": {"x"}},
        owners={"x": "k"},
        members={"x": {"m"}},
        heads={"x": (1, "h")},
        profiles={"k": (1, "p")},
        refs={"a": Ref(4702, "x")},
        evidence_texts={"e": "text"},
    )
    trial = original.copy()
    assert trial == original
    for field in dataclasses.fields(Snapshot):
        assert getattr(trial, field.name) is not getattr(original, field.name), field.name
    trial.belongs_to["k"].add("y")
    trial.members["x"].add("n")
    trial.stored_ids.add("b")
    trial.owners["y"] = "k"
    assert original.belongs_to == {"k": {"x"}} and original.members == {"x": {"m"}}
    assert original.stored_ids == {"a"} and "y" not in original.owners
