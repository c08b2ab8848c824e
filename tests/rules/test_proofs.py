"""The thinking-proof checker: rules 1-3 of the SPEC, on real signed events, and never a crash."""

from __future__ import annotations

import json
from typing import Any

from factories import key, sign
from hypothesis import given, settings
from hypothesis import strategies as st
from proof_events import cited

from tms.nostr.events import Event
from tms.results import ProofResult
from tms.rules.cited import MAX_TEXT_CHARS
from tms.rules.proof_steps import MAX_CITED_EVENTS, MAX_FROM, MAX_PROBLEMS, MAX_STEPS
from tms.rules.proof_tree import MAX_TREE_CHARS
from tms.rules.proofs import check_proof, cited_event_ids
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    KIND_MEMBERS,
)

KEY = key(0x70)
SECRET = "SECRET-MARKER-7f3a"

EVIDENCE = sign(
    KEY,
    KIND_EVIDENCE,
    {
        "collection": "mcas",
        "text": "Full text of the review.",
        "title": "Histamine intolerance: a review",
        "source": "Nutrients 2019",
    },
)
CLAIM = sign(
    KEY,
    KIND_CLAIM,
    {"collection": "mcas", "text": "Reduced DAO activity causes histamine build-up."},
)
CLAIM_2 = sign(
    KEY, KIND_CLAIM, {"collection": "mcas", "text": "Serum DAO does not track symptoms."}
)
LINK = sign(
    KEY,
    KIND_LINK,
    {
        "collection": "mcas",
        "from": EVIDENCE.id,
        "to": CLAIM.id,
        "relation": "SUPPORTS",
        "quote": "DAO is the main enzyme degrading ingested histamine",
        "reason": "The review states the mechanism.",
    },
)
CONTRADICTION = sign(
    KEY,
    KIND_CONTRADICTION,
    {
        "collection": "mcas",
        "claims": [CLAIM.id, CLAIM_2.id],
        "reason": "Serum levels disagree with the proposed mechanism.",
    },
)
MEMBERS = sign(KEY, KIND_MEMBERS, {"collection": "mcas", "members": []})
UNREADABLE = sign(KEY, KIND_CLAIM, "this is not JSON {")
NOT_AN_OBJECT = sign(KEY, KIND_LINK, "[1, 2, 3]")
WRONG_TYPES = sign(KEY, KIND_CONTRADICTION, {"claims": "x", "reason": 7})
# An event of another collection: the caller's look-up never returns it.
FOREIGN = sign(KEY, KIND_CLAIM, {"collection": "private", "text": f"{SECRET} confidential finding"})

COLLECTION: dict[str, Event] = {
    event.id: event
    for event in (
        EVIDENCE,
        CLAIM,
        CLAIM_2,
        LINK,
        CONTRADICTION,
        MEMBERS,
    )
}
ALL_IDS = [*COLLECTION, FOREIGN.id]


def spec_example() -> dict[str, Any]:
    return {
        "question": "Is DAO deficiency the cause of histamine intolerance?",
        "steps": [
            {
                "id": "s1",
                "say": "One review proposes reduced DAO activity as the mechanism.",
                # The SPEC's "<claim id>", "<link id>", plus the evidence the link quotes.
                "from": [CLAIM.id, LINK.id, EVIDENCE.id],
            },
            {
                "id": "s2",
                "say": "A contradiction says this sits badly with serum data.",
                "from": [CONTRADICTION.id],
            },
            {
                "id": "s3",
                "say": "Nothing in the collection covers children.",
                "from": [],
                "gap": True,
            },
            {
                "id": "root",
                "say": "Proposed mechanism, not an established cause.",
                "from": ["s1", "s2", "s3"],
            },
        ],
    }


def check(proof: object, events: dict[str, Event] | None = None) -> ProofResult:
    """What the service does: ask for the cited ids, fetch this collection's, then check."""
    pool = COLLECTION if events is None else events
    found = cited((pool[i] for i in cited_event_ids(proof) if i in pool), pool.values())
    result = check_proof(proof, found)
    assert_shape(result)
    return result


def assert_shape(result: ProofResult) -> None:
    data = result
    assert set(data) == {"ok", "problems", "root", "tree", "contested", "disputed_links"}
    for disputed in data["disputed_links"]:
        assert set(disputed) == {"link", "rebuts"} and disputed["rebuts"]
    for entry in data["contested"]:
        assert set(entry) == {"claim", "rebuts", "contradictions"}
        assert entry["rebuts"] or entry["contradictions"]
        assert all(len(d["reason"]) <= 200 for d in entry["rebuts"] + entry["contradictions"])
    assert isinstance(data["ok"], bool)
    assert isinstance(data["problems"], list)
    assert all(isinstance(problem, str) and "\n" not in problem for problem in data["problems"])
    assert data["root"] is None or isinstance(data["root"], str)
    assert isinstance(data["tree"], str)
    assert data["ok"] == (data["problems"] == [])
    assert len(data["problems"]) <= MAX_PROBLEMS + 1
    assert len(data["tree"]) <= MAX_TREE_CHARS + 200
    json.dumps(data)


def step(
    step_id: str, say: str = "A sentence.", cites: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"id": step_id, "say": say, "from": cites if cites is not None else [], **extra}


def only_problem(result: ProofResult) -> str:
    assert not result["ok"]
    assert len(result["problems"]) == 1, result["problems"]
    return result["problems"][0]


# --- the SPEC example ----------------------------------------------------------------------------


def test_spec_example_passes_and_expands_every_event() -> None:
    result = check(spec_example())
    assert result["ok"], result["problems"]
    # The cited claim is named by the cited contradiction: contested, and marked in the tree.
    assert result["contested"] == [
        {
            "claim": CLAIM.id,
            "rebuts": [],
            "contradictions": [
                {
                    "id": CONTRADICTION.id,
                    "reason": "Serum levels disagree with the proposed mechanism.",
                }
            ],
        }
    ]
    assert f"claim {CLAIM.id[:12]}…: [contested] Reduced DAO" in result["tree"]
    assert f"contested: in contradiction {CONTRADICTION.id[:12]}…" in result["tree"]
    assert result["problems"] == []
    assert result["root"] == "root"
    tree = result["tree"]
    assert "Is DAO deficiency the cause of histamine intolerance?" in tree
    assert "Reduced DAO activity causes histamine build-up." in tree  # claim text
    assert "SUPPORTS" in tree and "DAO is the main enzyme degrading ingested histamine" in tree
    assert "Serum levels disagree with the proposed mechanism." in tree  # contradiction reason
    assert "(2 claims)" in tree
    assert '"Histamine intolerance: a review" (source: Nutrients 2019)' in tree  # evidence title
    assert "[gap] Nothing in the collection covers children." in tree
    lines = tree.splitlines()
    assert lines[1] == "root: Proposed mechanism, not an established cause."
    assert lines[2].startswith("  s1: ")
    assert any(line.startswith("    claim ") for line in lines)


def test_evidence_is_expanded_with_title_and_source() -> None:
    proof = {"steps": [step("root", cites=[EVIDENCE.id])]}
    result = check(proof)
    assert result["ok"]
    assert '"Histamine intolerance: a review" (source: Nutrients 2019)' in result["tree"]
    assert EVIDENCE.id[:12] in result["tree"]


def test_evidence_without_title_falls_back_to_url_then_untitled() -> None:
    with_url = sign(
        KEY, KIND_EVIDENCE, {"collection": "c", "text": "t", "url": "https://example.org/x"}
    )
    bare = sign(KEY, KIND_EVIDENCE, {"collection": "c", "text": "t"})
    pool = {with_url.id: with_url, bare.id: bare}
    result = check({"steps": [step("root", cites=[with_url.id, bare.id])]}, pool)
    assert result["ok"]
    assert '"https://example.org/x"' in result["tree"]
    assert '"untitled"' in result["tree"]


def test_link_shows_what_it_links() -> None:
    result = check({"steps": [step("root", cites=[LINK.id])]})
    assert f"{EVIDENCE.id[:12]}… SUPPORTS {CLAIM.id[:12]}…" in result["tree"]


def test_member_lists_expand_to_their_kind_and_id() -> None:
    result = check({"steps": [step("root", cites=[MEMBERS.id])]})
    assert result["ok"], result["problems"]
    assert f"members {MEMBERS.id[:12]}…" in result["tree"]


def test_long_and_multiline_texts_are_trimmed_to_one_line() -> None:
    long_claim = sign(
        KEY, KIND_CLAIM, {"collection": "c", "text": "line one\nline two " + "x" * 5000}
    )
    say = "first\n\nsecond " + "y" * 5000
    result = check({"steps": [step("root", say, [long_claim.id])]}, {long_claim.id: long_claim})
    assert result["ok"]
    lines = result["tree"].splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("root: first second y")
    assert lines[1].startswith(f"  claim {long_claim.id[:12]}…: line one line two x")
    assert all(line.endswith("…") and len(line) < MAX_TEXT_CHARS + 40 for line in lines)


# --- rule 1 ------------------------------------------------------------------------------------


def test_event_of_another_collection_is_not_in_this_collection_and_never_shown() -> None:
    proof = {"steps": [step("root", cites=[CLAIM.id, FOREIGN.id])]}
    assert FOREIGN.id in cited_event_ids(proof)
    # Even a careless caller that passes the foreign event's id is only given this collection.
    result = check(proof)
    assert not result["ok"]
    assert result["problems"] == [
        f"step 'root' cites '{FOREIGN.id[:12]}…', which is not an event in this collection (rule 1)"
    ]
    assert result["root"] == "root"
    dumped = json.dumps(result)
    assert SECRET not in dumped and "confidential" not in dumped and "private" not in dumped
    assert "(not an event in this collection)" in result["tree"]


def test_missing_event_reads_exactly_like_a_foreign_one() -> None:
    missing = "ab" * 32
    foreign = check({"steps": [step("root", cites=[FOREIGN.id])]})
    absent = check({"steps": [step("root", cites=[missing])]})
    assert foreign["problems"] == [
        problem.replace(missing[:12], FOREIGN.id[:12]) for problem in absent["problems"]
    ]
    assert foreign["tree"] == absent["tree"].replace(missing[:12], FOREIGN.id[:12])


def test_junk_entry_is_neither_event_nor_step() -> None:
    result = check({"steps": [step("root", cites=[CLAIM.id, "s9"])]})
    assert only_problem(result) == (
        "step 'root' cites 's9', which is neither an event id nor the id of an earlier step "
        "(rule 1)"
    )
    upper = check({"steps": [step("root", cites=[CLAIM.id, CLAIM.id.upper()])]})
    assert "neither an event id" in only_problem(upper)


def test_forward_reference_is_reported() -> None:
    proof = {
        "steps": [
            step("s1", cites=[CLAIM.id, "s2"]),
            step("s2", cites=[CLAIM_2.id]),
            step("root", cites=["s1"]),
        ]
    }
    result = check(proof)
    assert only_problem(result) == (
        "step 's1' cites step 's2', which comes after it "
        "(rule 1: premises come before the steps that use them)"
    )
    assert result["root"] == "root"
    assert "s2: (cited out of order; not followed)" in result["tree"]
    assert "s2: A sentence." in result["tree"]  # every step still appears once in the tree


def test_self_reference_is_reported() -> None:
    result = check({"steps": [step("root", cites=[CLAIM.id, "root"])]})
    assert only_problem(result) == (
        "step 'root' cites itself (rule 1: premises come before the steps that use them)"
    )
    assert result["root"] == "root"


def test_non_string_from_entries_are_reported() -> None:
    result = check({"steps": [step("root", cites=[CLAIM.id, 7, None, ["x"]])]})
    assert result["problems"] == ["step 'root' has 3 'from' entries that are not strings (rule 1)"]
    one = check({"steps": [step("root", cites=[CLAIM.id, 7])]})
    assert one["problems"] == ["step 'root' has a 'from' entry that is not a string (rule 1)"]


def test_step_ids_win_over_event_ids() -> None:
    hex_id = "cd" * 32
    proof = {"steps": [step(hex_id, cites=[CLAIM.id]), step("root", cites=[hex_id])]}
    assert cited_event_ids(proof) == {CLAIM.id}
    assert check(proof)["ok"]


# --- rule 2 ------------------------------------------------------------------------------------


def test_two_uncited_steps() -> None:
    proof = {"steps": [step("s3", cites=[CLAIM.id]), step("root", cites=[CLAIM_2.id])]}
    result = check(proof)
    assert only_problem(result) == (
        "steps 's3' and 'root' are both uncited; exactly one step, the answer, may be uncited "
        "(rule 2)"
    )
    assert result["root"] is None
    assert "s3: A sentence." in result["tree"] and "root: A sentence." in result["tree"]


def test_many_uncited_steps_are_listed_briefly() -> None:
    proof = {"steps": [step(f"s{i}", cites=[CLAIM.id]) for i in range(15)]}
    result = check(proof)
    problem = only_problem(result)
    assert problem.startswith("steps 's0', 's1', ")
    assert "and 5 more are all uncited" in problem and problem.endswith("(rule 2)")
    assert result["root"] is None


def test_cycle_leaves_no_answer() -> None:
    proof = {"steps": [step("a", cites=[CLAIM.id, "b"]), step("b", cites=["a"])]}
    result = check(proof)
    assert result["root"] is None
    assert result["problems"] == [
        "step 'a' cites step 'b', which comes after it "
        "(rule 1: premises come before the steps that use them)",
        "every step is cited by another step, so there is no answer; exactly one step, the "
        "answer, must be cited by no other step (rule 2)",
    ]


def test_long_cycle_does_not_raise() -> None:
    n = 30
    steps = [step(f"s{i}", cites=[CLAIM.id, f"s{(i + 1) % n}"]) for i in range(n)]
    result = check({"steps": steps})
    assert result["root"] is None
    assert len(result["problems"]) == n
    assert result["problems"][-1].startswith("every step is cited by another step")
    n = 500
    steps = [step(f"s{i}", cites=[f"s{(i + 1) % n}"]) for i in range(n)]
    result = check({"steps": steps})
    assert result["root"] is None
    # Rule 1 for all but the last step, rule 2 once, and rule 3 for every step (no event).
    assert result["problems"][-1] == f"... and {(n - 1) + 1 + n - MAX_PROBLEMS} more problems"


# --- rule 3 ------------------------------------------------------------------------------------


def test_step_without_ancestry_and_not_gap() -> None:
    proof = {"steps": [step("s4"), step("root", cites=["s4", CLAIM.id])]}
    assert only_problem(check(proof)) == (
        "step 's4' has no ledger event in its ancestry and is not marked gap (rule 3)"
    )


def test_gap_step_needs_no_event_but_does_not_ground_its_citers() -> None:
    proof = {"steps": [step("s3", gap=True), step("root", cites=["s3"])]}
    assert only_problem(check(proof)) == (
        "step 'root' has no ledger event in its ancestry and is not marked gap (rule 3)"
    )
    proof["steps"][1]["gap"] = True
    assert check(proof)["ok"]


def test_gap_step_may_cite_and_passes_grounding_through() -> None:
    proof = {
        "steps": [
            step("s1", cites=[CLAIM.id]),
            step("s2", cites=["s1"], gap=True),
            step("root", cites=["s2"]),
        ]
    }
    assert check(proof)["ok"]


def test_grounding_travels_through_long_ancestry() -> None:
    steps = [step("s0", cites=[CLAIM.id])]
    steps += [step(f"s{i}", cites=[f"s{i - 1}"]) for i in range(1, 50)]
    assert check({"steps": steps})["ok"]


def test_citing_only_foreign_events_breaks_rules_1_and_3() -> None:
    result = check({"steps": [step("root", cites=[FOREIGN.id])]})
    assert [problem[-8:] for problem in result["problems"]] == ["(rule 1)", "(rule 3)"]
    assert SECRET not in result["tree"]


# --- malformed input ---------------------------------------------------------------------------


def test_malformed_proofs() -> None:
    cases: list[tuple[object, str]] = [
        (None, "the proof must be a JSON object with a 'steps' list"),
        ([], "the proof must be a JSON object with a 'steps' list"),
        ("steps", "the proof must be a JSON object with a 'steps' list"),
        ({}, "the proof has no 'steps' list"),
        ({"steps": {"id": "x"}}, "'steps' must be a list of step objects"),
        ({"steps": []}, "the proof has no steps; exactly one step, the answer, is needed (rule 2)"),
    ]
    for proof, message in cases:
        result = check(proof)
        assert result["problems"] == [message], proof
        assert result["root"] is None
        assert cited_event_ids(proof) == set()


def test_question_must_be_a_string() -> None:
    proof = spec_example()
    proof["question"] = ["not", "a", "string"]
    assert only_problem(check(proof)) == "'question' must be a string when given"
    del proof["question"]
    result = check(proof)
    assert result["ok"] and result["tree"].startswith("root: ")


def test_malformed_steps() -> None:
    good = step("root", cites=[CLAIM.id, "s1", "s2", "s3", "s4", "s5"])
    proof = {
        "steps": [
            step("s1", cites=[CLAIM.id]),
            "not a step",
            {"say": "No id.", "from": [CLAIM.id]},
            step("  ", cites=[CLAIM.id]),
            step("x" * 65, cites=[CLAIM.id]),
            step("s2", say="   ", cites=[CLAIM.id]),
            step("s3", cites=[CLAIM.id], gap="yes"),
            {"id": "s4", "say": "No from."},
            {"id": "s5", "say": "From is a string.", "from": CLAIM.id},
            step("s1", cites=[CLAIM.id]),
            good,
        ]
    }
    result = check(proof)
    assert result["problems"] == [
        "step #2 is not an object with 'id', 'say' and 'from'",
        "step #3 has no 'id' (a non-blank string is required)",
        "step #4 has no 'id' (a non-blank string is required)",
        "step #5 has an 'id' longer than 64 characters",
        "step 's2' has no 'say' (a one-sentence string is required)",
        "step 's3' has a 'gap' that is neither true nor false",
        "step 's4' has no 'from' list (use [] when it cites nothing)",
        "step 's5' has a 'from' that is not a list",
        "step #10 reuses the id 's1' of step #1; step ids must be unique",
        "step 's4' has no ledger event in its ancestry and is not marked gap (rule 3)",
        "step 's5' has no ledger event in its ancestry and is not marked gap (rule 3)",
    ]
    # Steps without a usable id are reported for that, not again under rule 2.
    assert result["root"] == "root"
    assert "#10 (s1, duplicate id): A sentence." in result["tree"]


def test_duplicate_ids_resolve_to_the_first_step() -> None:
    proof = {
        "steps": [
            step("s1", cites=[CLAIM.id]),
            step("s1", "Second s1.", []),
            step("root", cites=["s1"]),
        ]
    }
    result = check(proof)
    assert result["problems"] == [
        "step #2 reuses the id 's1' of step #1; step ids must be unique",
        "step #2 ('s1') has no ledger event in its ancestry and is not marked gap (rule 3)",
    ]
    assert result["root"] == "root"


def test_hostile_ids_stay_on_one_line() -> None:
    proof = {"steps": [step("a\nb\x00c", cites=["x\ny"])]}
    result = check(proof)
    assert all("\n" not in problem for problem in result["problems"])
    assert "'a b c' cites 'x y'" in result["problems"][0]


# --- caps --------------------------------------------------------------------------------------


def test_too_many_steps() -> None:
    steps = [step("s0", cites=[CLAIM.id])]
    steps += [step(f"s{i}", cites=[f"s{i - 1}"]) for i in range(1, MAX_STEPS + 5)]
    result = check({"steps": steps})
    assert result["problems"] == [
        f"the proof has {MAX_STEPS + 5} steps, more than the limit of {MAX_STEPS}; only the "
        f"first {MAX_STEPS} were checked and the answer could not be determined"
    ]
    assert result["root"] is None


def test_too_many_from_entries() -> None:
    ids = [f"{i:064x}" for i in range(MAX_FROM + 50)]
    proof = {"steps": [step("root", cites=[*ids, CLAIM.id])]}
    assert cited_event_ids(proof) == set(ids[:MAX_FROM])
    result = check(proof)
    assert result["problems"][0] == (
        f"step 'root' cites {MAX_FROM + 51} entries, more than the limit of {MAX_FROM}; "
        f"only the first {MAX_FROM} were checked"
    )
    # The cap, MAX_FROM entries not in this collection, and rule 3 (CLAIM was cut off).
    assert len(result["problems"]) == MAX_PROBLEMS + 1
    assert result["problems"][-1] == f"... and {MAX_FROM + 2 - MAX_PROBLEMS} more problems"


def test_too_many_distinct_events() -> None:
    per_step = MAX_FROM - 1
    n_steps = MAX_CITED_EVENTS // per_step + 2
    steps = [
        step(f"s{i}", cites=[f"{i * per_step + j:064x}" for j in range(per_step)] + [f"s{i - 1}"])
        for i in range(n_steps)
    ]
    steps[0]["from"].pop()
    steps.append(step("root", cites=[f"s{n_steps - 1}"]))
    proof = {"steps": steps}
    ids = cited_event_ids(proof)
    assert len(ids) == MAX_CITED_EVENTS
    assert f"{0:064x}" in ids and f"{MAX_CITED_EVENTS:064x}" not in ids
    result = check(proof)
    assert not result["ok"] and result["root"] == "root"
    assert result["problems"][-1].startswith("... and ")


# --- size (speed is measured in bench/core.py) ---------------------------------------------


def checked(proof: dict[str, Any], events: dict[str, Event]) -> ProofResult:
    result = check_proof(proof, cited(events.values()))
    assert_shape(result)
    return result


def test_thousand_step_chain_is_flat() -> None:
    steps = [step("s0", cites=[CLAIM.id, LINK.id])]
    steps += [step(f"s{i}", f"Step {i}.", [f"s{i - 1}"]) for i in range(1, MAX_STEPS)]
    proof = {"question": "Deep?", "steps": steps}
    assert cited_event_ids(proof) == {CLAIM.id, LINK.id}
    result = checked(proof, COLLECTION)
    assert result["ok"] and result["root"] == f"s{MAX_STEPS - 1}"
    lines = result["tree"].splitlines()
    assert len(lines) == 1 + MAX_STEPS + 3  # question, steps, claim, link and its quote
    assert max(len(line) for line in lines) < 200  # indentation stops growing
    assert "(depth 999) s0: A sentence." in result["tree"]


def test_thousand_step_wide_dag_is_bounded() -> None:
    events = list(COLLECTION)[:5]
    steps = [step(f"s{i}", cites=[events[i % 5]]) for i in range(10)]
    for i in range(10, MAX_STEPS - 1):
        # every step cites the 99 before it and an event: a diamond at every turn
        steps.append(step(f"s{i}", cites=[*(f"s{j}" for j in range(max(0, i - 99), i)), events[0]]))
    steps.append(step("root", cites=[f"s{j}" for j in range(MAX_STEPS - 100, MAX_STEPS - 1)]))
    proof = {"steps": steps}
    result = checked(proof, COLLECTION)
    assert result["ok"], result["problems"][:3]
    assert result["root"] == "root"
    assert len(result["tree"]) <= MAX_TREE_CHARS + 200
    assert "(shown above)" in result["tree"]


def test_tree_is_cut_off_when_huge() -> None:
    say = "z" * 5000
    steps = [step("s0", say, [CLAIM.id, LINK.id, EVIDENCE.id])]
    steps += [
        step(f"s{i}", say, [CLAIM.id, LINK.id, EVIDENCE.id, f"s{i - 1}"])
        for i in range(1, MAX_STEPS)
    ]
    result = check({"steps": steps})
    assert result["ok"], result["problems"][:3]
    assert len(result["tree"]) <= MAX_TREE_CHARS + 200
    assert result["tree"].endswith(f"... (tree cut off at {MAX_TREE_CHARS} characters)")


# --- never raises --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(ALL_IDS),
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(
            st.sampled_from(["id", "say", "from", "gap", "steps", "question", "x"])
            | st.text(max_size=5),
            children,
            max_size=6,
        )
    ),
    max_leaves=40,
)

STEP_IDS = ["s1", "s2", "s3", "root", "", " ", "cd" * 32]
scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
junk = (
    scalars
    | st.lists(scalars, max_size=3)
    | st.dictionaries(st.sampled_from(["id", "say", "from"]), scalars, max_size=3)
)
references = st.sampled_from([*ALL_IDS, *STEP_IDS])


def sometimes(draw: st.DrawFn, usual: st.SearchStrategy[Any]) -> Any:
    """Usually a plausible value, one time in eight junk."""
    return draw(junk) if draw(st.integers(0, 7)) == 0 else draw(usual)


@st.composite
def proofs(draw: st.DrawFn) -> dict[str, Any]:
    steps: list[Any] = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 20)) == 0:
            steps.append(draw(junk))
            continue
        raw: dict[str, Any] = {}
        if draw(st.integers(0, 10)):
            raw["id"] = sometimes(draw, st.sampled_from(STEP_IDS))
        if draw(st.integers(0, 10)):
            raw["say"] = sometimes(draw, st.text(max_size=30))
        if draw(st.integers(0, 10)):
            raw["from"] = sometimes(draw, st.lists(references | junk, max_size=6))
        if draw(st.booleans()):
            raw["gap"] = sometimes(draw, st.booleans())
        steps.append(raw)
    proof: dict[str, Any] = {"steps": steps}
    if draw(st.booleans()):
        proof["question"] = sometimes(draw, st.text(max_size=30))
    return proof


@settings(max_examples=200, deadline=None)
@given(proof=json_values)
def test_arbitrary_json_never_raises(proof: object) -> None:
    assert cited_event_ids(proof) <= set(ALL_IDS)
    result = check(proof)
    assert SECRET not in json.dumps(result)


@settings(max_examples=200, deadline=None)
@given(proof=proofs())
def test_proof_shaped_input_never_raises(proof: dict[str, Any]) -> None:
    ids = cited_event_ids(proof)
    assert all(len(event_id) == 64 for event_id in ids)
    result = check(proof)
    assert SECRET not in json.dumps(result)
    if result["root"] is not None:
        steps = proof["steps"]
        assert any(isinstance(raw, dict) and raw.get("id") == result["root"] for raw in steps)
    # Passing every event, foreign ones included, still never raises.
    assert_shape(check_proof(proof, cited([*COLLECTION.values(), FOREIGN])))


@st.composite
def valid_proofs(draw: st.DrawFn) -> dict[str, Any]:
    """A random DAG that obeys rules 1-3: earlier steps and this collection's events only, every
    step but the answer cited, and `gap` exactly where no event lies below."""
    count = draw(st.integers(1, 30))
    ids = [f"s{i}" for i in range(count - 1)] + ["answer"]
    steps: list[dict[str, Any]] = []
    grounded: list[bool] = []
    cited: set[int] = set()
    for i in range(count):
        earlier = draw(st.lists(st.integers(0, i - 1), max_size=4, unique=True)) if i else []
        if i == count - 1:
            earlier = sorted({*earlier, *(j for j in range(i) if j not in cited)})
        events = draw(st.lists(st.sampled_from(list(COLLECTION)), max_size=3, unique=True))
        cites = [*(ids[j] for j in earlier), *events]
        draw(st.randoms()).shuffle(cites)
        grounded.append(bool(events) or any(grounded[j] for j in earlier))
        cited.update(earlier)
        steps.append(step(ids[i], f"Step {i}.", cites, gap=not grounded[i]))
    return {"question": "Anything?", "steps": steps}


@settings(max_examples=100, deadline=None)
@given(proof=valid_proofs())
def test_valid_proofs_pass_and_show_every_step_once(proof: dict[str, Any]) -> None:
    result = check(proof)
    assert result["ok"], result["problems"]
    assert result["root"] == "answer"
    lines = [line.strip() for line in result["tree"].splitlines()]
    for raw in proof["steps"]:
        assert lines.count(f"{raw['id']}: {'[gap] ' if raw['gap'] else ''}{raw['say']}") == 1


# --- contested premises (reading them from the ledger: tests/ledger/test_cited.py) ----------------


REBUTTAL = sign(
    KEY,
    KIND_LINK,
    {
        "collection": "mcas",
        "from": EVIDENCE.id,
        "to": CLAIM_2.id,
        "relation": "REBUTS",
        "quote": "Full text",
        "reason": "x" * 300,
    },
)


def test_contested_lists_the_disputes_of_cited_claims_without_touching_the_rules() -> None:
    collection = {**COLLECTION, REBUTTAL.id: REBUTTAL}
    proof = {"steps": [step("s1", cites=[CLAIM_2.id]), step("root", cites=["s1", CLAIM.id])]}
    result = check(proof, collection)
    assert result["ok"] and result["problems"] == []
    assert [entry["claim"] for entry in result["contested"]] == [CLAIM_2.id, CLAIM.id]
    rebutted = result["contested"][0]
    assert rebutted["rebuts"] == [{"id": REBUTTAL.id, "reason": "x" * 199 + "…"}]
    assert [d["id"] for d in rebutted["contradictions"]] == [CONTRADICTION.id]
    tree = result["tree"]
    assert f"contested: rebutted by link {REBUTTAL.id[:12]}…, in contradiction" in tree
    # Without the disputes, the same proof is exactly as well formed and nothing is contested.
    plain = check_proof(proof, cited(collection[i] for i in (CLAIM.id, CLAIM_2.id)))
    assert (plain["ok"], plain["problems"], plain["root"]) == (True, [], "root")
    assert plain["contested"] == [] and "contested" not in plain["tree"]


def test_a_rebutted_link_is_a_disputed_link_not_a_contested_claim() -> None:
    """A rebutted link cited in a proof is listed in `disputed_links` and marked in the tree
    (issue 27: `check_proof` answered `contested: []` and said nothing of it); it is not a
    contested claim, and a contradiction cited is neither."""
    against_link = sign(
        KEY,
        KIND_LINK,
        {
            "collection": "mcas",
            "from": EVIDENCE.id,
            "to": LINK.id,
            "relation": "REBUTS",
            "quote": "review",
            "reason": "Out of context.",
        },
    )
    collection = {EVIDENCE.id: EVIDENCE, LINK.id: LINK, against_link.id: against_link}
    result = check({"steps": [step("root", cites=[LINK.id, EVIDENCE.id])]}, collection)
    assert result["ok"] and result["contested"] == []
    assert result["disputed_links"] == [
        {"link": LINK.id, "rebuts": [{"id": against_link.id, "reason": "Out of context."}]}
    ]
    assert f"link {LINK.id[:12]}…: [disputed] " in result["tree"]
    assert f"disputed: rebutted by link {against_link.id[:12]}…" in result["tree"]
    # The link that disputes, cited itself, is disputed by nothing.
    result = check({"steps": [step("root", cites=[against_link.id])]}, collection)
    assert result["disputed_links"] == [] and "[disputed]" not in result["tree"]


def test_a_links_anchor_shows_in_the_tree() -> None:
    quoted = sign(
        KEY,
        KIND_LINK,
        {
            "collection": "mcas",
            "from": EVIDENCE.id,
            "to": CLAIM.id,
            "relation": "SUPPORTS",
            "quote": "text of THE review",
            "reason": "It says so.",
        },
    )
    twice = sign(KEY, KIND_EVIDENCE, {"collection": "mcas", "text": "a b. A B."})
    again = sign(
        KEY,
        KIND_LINK,
        {
            "collection": "mcas",
            "from": twice.id,
            "to": CLAIM.id,
            "relation": "SUPPORTS",
            "quote": "a b",
            "reason": "Twice.",
        },
    )
    collection = {e.id: e for e in (EVIDENCE, CLAIM, quoted, twice, again)}
    tree = check({"steps": [step("root", cites=[quoted.id, again.id])]}, collection)["tree"]
    assert 'quote: "text of THE review" at characters 5-23\n' in tree + "\n"
    assert 'quote: "a b" at characters 0-3 (the first of 2 occurrences)' in tree
