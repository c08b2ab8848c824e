"""The enabled plugins' write policies as one `Admission`, and their read filters: a batch's
decision from every policy's verdicts, a policy that raises, hangs or answers nonsense rejecting
with a clear message and counted, never raising into the caller."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import pytest
from factories import OWNER, sign
from prometheus_client import REGISTRY

from tms.extension import (
    ACCEPT,
    SHADOW_REJECT,
    Door,
    Event,
    Origin,
    Read,
    Verdict,
    WritePolicy,
    reject,
)
from tms.nostr.events import Event as CoreEvent
from tms.plugins.policies import EventPolicy, ReadFilters, WritePolicies, cleaned
from tms.rules.admission import ACCEPTED, Action

pytestmark = pytest.mark.anyio

ORIGIN = Origin(Door.RELAY, pubkey=OWNER.pubkey, address="127.0.0.1")


def batch(*texts: str) -> list[CoreEvent]:
    return [sign(OWNER, 4702, {"collection": "mcas", "text": text}) for text in texts]


def runner(*policies: tuple[str, WritePolicy], seconds: float = 1.0) -> WritePolicies:
    return WritePolicies([EventPolicy(name, policy, seconds) for name, policy in policies])


def failures(plugin: str, cause: str, seam: str = "write_policy") -> float:
    value = REGISTRY.get_sample_value(
        "tms_plugin_failures_total", {"plugin": plugin, "seam": seam, "cause": cause}
    )
    return value or 0.0


def verdicts(plugin: str, action: str) -> float:
    value = REGISTRY.get_sample_value(
        "tms_plugin_verdicts_total", {"plugin": plugin, "action": action}
    )
    return value or 0.0


def by_text(answers: dict[str, Verdict]) -> WritePolicy:
    async def policy(event: Event, origin: Origin) -> Verdict:
        return answers.get(str(event.fields()["text"]), ACCEPT)

    return policy


async def test_no_policy_accepts_at_once() -> None:
    empty = WritePolicies([])
    assert await empty.admit(batch("a"), ORIGIN) is ACCEPTED


async def test_a_batch_is_rejected_by_its_first_rejected_event_named_by_position() -> None:
    events = batch("fine", "bad", "worse")
    policy = by_text({"bad": reject("blocked: no bad words"), "worse": reject("no")})
    decision = await runner(("words", policy)).admit(events, ORIGIN)
    assert decision.action is Action.REJECT
    # the relay adds `blocked:` itself, so the policy's own is not doubled
    assert (decision.message, decision.event) == ("no bad words", 1)  # the ledger names it
    assert decision.policy == "words"


async def test_shadow_reject_wins_only_when_nothing_rejects() -> None:
    events = batch("a", "quiet", "b")
    shadow = by_text({"quiet": SHADOW_REJECT})
    decision = await runner(("shadow", shadow)).admit(events, ORIGIN)
    assert decision.action is Action.SHADOW_REJECT
    assert decision.event == 1
    assert decision.policy == "shadow"
    rejecting = by_text({"b": reject("not b")})
    decision = await runner(("shadow", shadow), ("strict", rejecting)).admit(events, ORIGIN)
    assert (decision.action, decision.policy) == (Action.REJECT, "strict")


async def test_policies_are_asked_in_order_and_a_reject_ends_the_batch() -> None:
    asked: list[tuple[str, str]] = []

    def recording(name: str, answers: dict[str, Verdict]) -> WritePolicy:
        async def policy(event: Event, origin: Origin) -> Verdict:
            text = str(event.fields()["text"])
            asked.append((name, text))
            return answers.get(text, ACCEPT)

        return policy

    events = batch("a", "b", "c")
    first = recording("first", {"b": reject("stop")})
    second = recording("second", {})
    decision = await runner(("first", first), ("second", second)).admit(events, ORIGIN)
    assert decision.action is Action.REJECT
    assert asked == [("first", "a"), ("first", "b")]  # neither "c" nor the second policy


async def test_the_policy_sees_the_event_the_door_the_key_and_the_address() -> None:
    seen: list[tuple[Event, Origin]] = []

    async def policy(event: Event, origin: Origin) -> Verdict:
        seen.append((event, origin))
        return ACCEPT

    [core] = batch("hello")
    assert await runner(("p", policy)).admit([core], ORIGIN) is ACCEPTED
    [(event, origin)] = seen
    assert origin == ORIGIN
    assert (event.id, event.pubkey, event.kind, event.sig) == (
        core.id,
        core.pubkey,
        4702,
        core.sig,
    )
    assert event.content == core.content and event.fields() == {
        "collection": "mcas",
        "text": "hello",
    }
    assert event.to_dict() == core.to_dict() and event.tags == ()


async def test_a_policy_that_raises_rejects_cleanly_and_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(event: Event, origin: Origin) -> Verdict:
        raise RuntimeError("secret internals")

    before = failures("broken", "raised")
    with caplog.at_level(logging.ERROR, "tms.extension"):
        decision = await runner(("broken", broken)).admit(batch("a"), ORIGIN)
    assert decision.action is Action.REJECT
    assert decision.message.endswith(
        "write policy 'broken' failed; the server's log has the details"
    )
    assert "secret internals" not in decision.message  # the log has it, the client not
    assert "secret internals" in caplog.text
    assert failures("broken", "raised") == before + 1


async def test_a_policy_that_hangs_times_out_and_is_counted() -> None:
    async def slow(event: Event, origin: Origin) -> Verdict:
        await asyncio.sleep(30)
        return ACCEPT

    before = failures("slow", "timeout")
    decision = await runner(("slow", slow), seconds=0.05).admit(batch("a"), ORIGIN)
    assert decision.action is Action.REJECT
    assert decision.message.endswith("write policy 'slow' did not answer within 0.05 s")
    assert failures("slow", "timeout") == before + 1


async def test_a_policy_that_swallows_the_timeout_still_times_out() -> None:
    async def stubborn(event: Event, origin: Origin) -> Verdict:
        with contextlib.suppress(asyncio.CancelledError):  # a badly written one
            await asyncio.sleep(30)
        return ACCEPT

    decision = await runner(("stubborn", stubborn), seconds=0.05).admit(batch("a", "b"), ORIGIN)
    assert decision.message.endswith("write policy 'stubborn' did not answer within 0.05 s")


async def test_slow_calls_each_within_the_timeout_pass() -> None:
    async def steady(event: Event, origin: Origin) -> Verdict:
        await asyncio.sleep(0.03)
        return ACCEPT

    assert await runner(("steady", steady), seconds=0.05).admit(batch(*"abcd"), ORIGIN) is ACCEPTED


async def test_the_callers_own_cancellation_is_not_taken_for_a_timeout() -> None:
    started = asyncio.Event()

    async def slow(event: Event, origin: Origin) -> Verdict:
        started.set()
        await asyncio.sleep(30)
        return ACCEPT

    task = asyncio.ensure_future(runner(("slow", slow), seconds=5).admit(batch("a"), ORIGIN))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_policy_whose_own_timeout_fires_has_failed_not_timed_out() -> None:
    async def own_timeout(event: Event, origin: Origin) -> Verdict:
        raise TimeoutError("its upstream")

    decision = await runner(("own", own_timeout), seconds=5).admit(batch("a"), ORIGIN)
    assert decision.message.endswith("write policy 'own' failed; the server's log has the details")


async def test_a_policy_that_answers_no_verdict_has_failed() -> None:
    async def sloppy(event: Event, origin: Origin) -> Verdict:
        return True  # type: ignore[return-value]

    decision = await runner(("sloppy", sloppy)).admit(batch("a"), ORIGIN)
    assert decision.message.endswith(
        "write policy 'sloppy' failed; the server's log has the details"
    )


async def test_verdicts_are_counted_by_plugin_and_action() -> None:
    policy = by_text({"q": SHADOW_REJECT})
    before = (verdicts("count", "accept"), verdicts("count", "shadow_reject"))
    await runner(("count", policy)).admit(batch("a", "q", "b"), ORIGIN)
    assert (verdicts("count", "accept"), verdicts("count", "shadow_reject")) == (
        before[0] + 2,
        before[1] + 1,
    )


def test_messages_are_one_bounded_line_without_a_prefix_of_their_own() -> None:
    assert cleaned("blocked:   not\non the list ") == "not on the list"
    assert cleaned("rate-limited: slow down") == "rate-limited: slow down"
    assert len(cleaned("x" * 10_000)) == 500
    assert cleaned("") == ""


async def test_an_empty_reject_message_names_the_policy() -> None:
    decision = await runner(("quiet", by_text({"a": reject("")}))).admit(batch("a"), ORIGIN)
    assert decision.message == "refused by write policy 'quiet'"


# --- read filters --------------------------------------------------------------------------------


async def test_read_filters_pass_refuse_and_fail_closed() -> None:
    asked: list[Read] = []

    async def private(read: Read) -> str | None:
        asked.append(read)
        return "blocked: no searching here" if read.filters else None

    async def broken(read: Read) -> str | None:
        raise ValueError("oops")

    async def slow(read: Read) -> str | None:
        await asyncio.sleep(30)
        return None

    read = Read(ORIGIN, collection="mcas", filters=({"search": "dao"},))
    assert await ReadFilters([("p", private)], 1).check(Read(ORIGIN, tool="list_claims")) is None
    assert await ReadFilters([("p", private)], 1).check(read) == "no searching here"
    assert asked[-1] is read
    before = failures("rb", "raised", "read_filter")
    answer = await ReadFilters([("rb", broken), ("p", private)], 1).check(read)
    assert answer == "read filter 'rb' failed; the server's log has the details"
    assert failures("rb", "raised", "read_filter") == before + 1
    answer = await ReadFilters([("rs", slow)], 0.05).check(read)
    assert answer == "read filter 'rs' did not answer within 0.05 s"
    assert await ReadFilters([], 1).check(read) is None


async def test_many_events_cost_one_pass(anyio_backend: str) -> None:
    """A 1,000-event batch through an accepting policy: every event asked once."""
    count = 0

    async def counting(event: Event, origin: Origin) -> Verdict:
        nonlocal count
        count += 1
        return ACCEPT

    events: Sequence[CoreEvent] = batch(*(str(i) for i in range(1000)))
    assert await runner(("c", counting)).admit(events, ORIGIN) is ACCEPTED
    assert count == 1000


async def test_a_policy_failing_on_every_batch_is_one_line_not_a_traceback_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(event: Event, origin: Origin) -> Verdict:
        raise RuntimeError("secret internals\nover two lines")

    policies = runner(("broken", broken))
    with caplog.at_level(logging.INFO, "tms.extension"):
        for number in range(50):
            decision = await policies.admit(batch(f"e{number}"), ORIGIN)
            assert decision.action is Action.REJECT
    lines = [line for record in caplog.records for line in record.getMessage().splitlines()]
    assert lines == [
        "plugin broken: its write policy failed: RuntimeError: secret internals over two lines"
    ]
    assert not any(record.exc_info for record in caplog.records)
