"""The enabled plugins' write policies as the ledger's one `Admission`, and their read filters
as one check.

The ledger asks `WritePolicies.admit` once per batch, after its own envelope, signature, schema
and rate checks and before its transaction. Each policy is asked in `TMS_PLUGINS` order, about
every event of the batch; the first rejected event ends it (the batch is all or nothing, so the
rest cannot matter), and a shadow-rejected one makes the batch look stored while nothing is.

A policy is the operator's code, not the server's: one that raises, times out
(`TMS_PLUGIN_TIMEOUT_SECONDS`, per call) or answers something that is not a `Verdict` rejects
the event with a message saying which policy failed, is logged and counted
(`tms_plugin_failures_total`), and never reaches the client as a traceback or a 500. Failing
closed is the point of a write policy: an allow-list that crashed must not let everything in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final, Protocol

from prometheus_client import Counter

from tms.extension import Action, Event, Origin, ReadFilter, Verdict, WritePolicy, reject
from tms.metrics import PLUGIN_FAILURES, PLUGIN_READS_REFUSED, PLUGIN_VERDICTS
from tms.nostr.events import Event as CoreEvent
from tms.plugins.repeats import Repeats
from tms.plugins.vocabulary import core_action, origin_seen, read_seen
from tms.rules import admission
from tms.rules.admission import ACCEPTED, Admission, Decision

log = logging.getLogger("tms.extension")  # the name operators filter on, kept from before the move

SEAM: Final = "write policy"  # as the log names it
MAX_MESSAGE_CHARS: Final = 500  # of a policy's message, as the client is told it
BLOCKED_PREFIX: Final = "blocked:"  # the relay adds it; strfry plugins often write it themselves
_ACTION_LABELS: Final = {
    Action.ACCEPT: "accept",
    Action.REJECT: "reject",
    Action.SHADOW_REJECT: "shadow_reject",
}


class Judge(Protocol):
    """One plugin's write policy as the runner asks it: verdicts for the events in order, which
    may stop after the first reject (the rest are not asked). It is handed the surface's values
    (`tms.extension`), never the core's."""

    name: str

    async def judge(self, events: Sequence[Event], origin: Origin) -> list[Verdict]: ...


def failed(name: str, seam: str = "write policy") -> str:
    """What the client is told when a plugin failed: which one, and where the details are."""
    return f"{seam} '{name}' failed; the server's log has the details"


def timed_out(name: str, seconds: float, seam: str = "write policy") -> str:
    return f"{seam} '{name}' did not answer within {seconds:g} s"


def cleaned(message: str) -> str:
    """A plugin's message as a client is told it: one line, bounded, without a `blocked:` of
    its own (the relay puts NIP-01's prefix in front of every policy's refusal)."""
    text = " ".join(message.split())
    if text.startswith(BLOCKED_PREFIX):
        text = text[len(BLOCKED_PREFIX) :].lstrip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


class EventPolicy:
    """A plugin's `WritePolicy`, asked event by event with a timeout on each call."""

    def __init__(self, name: str, policy: WritePolicy, seconds: float) -> None:
        self.name = name
        self._policy = policy
        self._seconds = seconds
        self._repeats = Repeats(log)

    async def judge(self, events: Sequence[Event], origin: Origin) -> list[Verdict]:
        verdicts: list[Verdict] = []
        deadline = _Deadline(self._seconds)
        try:
            for event in events:
                deadline.call()
                try:
                    verdict = await self._policy(event, origin)
                except asyncio.CancelledError:
                    if not deadline.expired():
                        raise
                    verdicts.append(self._timeout(event))
                    break
                except Exception as exc:
                    verdicts.append(self._failure(event, exc))
                    break
                if deadline.expired():  # the policy swallowed the cancellation
                    verdicts.append(self._timeout(event))
                    break
                if not isinstance(verdict, Verdict):
                    answered = f"it answered {type(verdict).__name__}, not a Verdict"
                    verdicts.append(self._failure(event, answered))
                    break
                verdicts.append(verdict)
                if verdict.action is Action.REJECT:
                    break
        finally:
            deadline.close()
        return verdicts

    def _timeout(self, event: Event) -> Verdict:
        said = f"it did not answer within {self._seconds:g} s (event {event.id})"
        self._repeats.failed(self.name, SEAM, said, logging.WARNING)
        PLUGIN_FAILURES.labels(self.name, "write_policy", "timeout").inc()
        return reject(timed_out(self.name, self._seconds))

    def _failure(self, event: Event, error: Exception | str) -> Verdict:
        """One line in the log (`tms.plugins.repeats`: a policy failing on every batch is
        summed up), never a traceback per event; the client is told only which policy."""
        self._repeats.failed(self.name, SEAM, error)
        PLUGIN_FAILURES.labels(self.name, "write_policy", "raised").inc()
        return reject(failed(self.name))


class _Deadline:
    """A timeout on each of the calls one task makes one after another: one timer, moved only
    when it comes due early, since nearly every call ends long before it. A timeout per call
    (`asyncio.timeout`) costs about 5 µs, a fifth of a microsecond's work for an allow-list;
    a 1,000-event batch would feel it. When a call is late, the task is cancelled, as
    `asyncio.timeout` does, and `expired` takes that cancellation back."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._fired = False

    def call(self) -> None:
        """A call starts now."""
        self._started = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(self._started + self._seconds, self._due)

    def _due(self) -> None:
        self._timer = None
        late = self._started + self._seconds
        if self._loop.time() < late:  # an earlier call ended in time: wait for this one's
            self._timer = self._loop.call_at(late, self._due)
            return
        self._fired = True
        self._task.cancel()

    def expired(self) -> bool:
        """Whether the call just made ran late; if so, the cancellation is taken back (once)
        and the task goes on, unless something else cancelled it too."""
        if not self._fired:
            return False
        self._fired = False
        if self._task.uncancel() > 0:
            raise asyncio.CancelledError
        return True

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class WritePolicies:
    """Every enabled write policy, in `TMS_PLUGINS` order, as one `Admission`."""

    def __init__(self, judges: Sequence[Judge]) -> None:
        self._judges = tuple(judges)
        self._counters: dict[str, dict[Action, Counter]] = {
            judge.name: {
                action: PLUGIN_VERDICTS.labels(judge.name, label)
                for action, label in _ACTION_LABELS.items()
            }
            for judge in self._judges
        }

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(judge.name for judge in self._judges)

    async def admit(self, events: Sequence[CoreEvent], origin: admission.Origin) -> Decision:
        """ACCEPT, REJECT with the first rejected event's message and position (which the
        ledger names before it: `events[3] (ab12…): ...`), or SHADOW_REJECT when some policy
        shadow-rejected an event and none rejected any."""
        if not self._judges or not events:
            return ACCEPTED
        views = [Event(event) for event in events]
        seen = origin_seen(origin)
        shadow: Decision | None = None
        for judge in self._judges:
            verdicts = await judge.judge(views, seen)
            counters = self._counters[judge.name]
            accepted = 0
            for position, verdict in enumerate(verdicts):
                if verdict.action is Action.ACCEPT:
                    accepted += 1
                    continue
                counters[verdict.action].inc()
                if verdict.action is Action.REJECT:
                    counters[Action.ACCEPT].inc(accepted)
                    message = cleaned(verdict.message) or f"refused by write policy '{judge.name}'"
                    return Decision(core_action(Action.REJECT), message, judge.name, position)
                if shadow is None:
                    message = cleaned(verdict.message) or "shadow-rejected"
                    action = core_action(Action.SHADOW_REJECT)
                    shadow = Decision(action, message, judge.name, position)
            counters[Action.ACCEPT].inc(accepted)
        return shadow or ACCEPTED


def as_admission(policies: WritePolicies) -> Admission:
    """What the ledger holds it as (and mypy's proof that it is one)."""
    return policies


class ReadFilters:
    """Every enabled read filter, in `TMS_PLUGINS` order: the first refusal is the answer."""

    def __init__(self, filters: Sequence[tuple[str, ReadFilter]], seconds: float) -> None:
        self._filters = tuple(filters)
        self._seconds = seconds
        self._repeats = Repeats(log)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._filters)

    async def check(self, read: admission.Read) -> str | None:
        """None lets the read through; otherwise the message the client is told (a filter that
        failed refuses, as a write policy does)."""
        if not self._filters:
            return None
        seen = read_seen(read)
        for name, read_filter in self._filters:
            deadline = asyncio.timeout(self._seconds)
            try:
                async with deadline:
                    answer = await read_filter(seen)
            except TimeoutError as exc:
                if deadline.expired():
                    said = f"it did not answer within {self._seconds:g} s"
                    self._repeats.failed(name, "read filter", said, logging.WARNING)
                    PLUGIN_FAILURES.labels(name, "read_filter", "timeout").inc()
                    return timed_out(name, self._seconds, "read filter")
                self._repeats.failed(name, "read filter", exc)
                PLUGIN_FAILURES.labels(name, "read_filter", "raised").inc()
                return failed(name, "read filter")
            except Exception as exc:
                self._repeats.failed(name, "read filter", exc)
                PLUGIN_FAILURES.labels(name, "read_filter", "raised").inc()
                return failed(name, "read filter")
            if answer is None:
                continue
            if not isinstance(answer, str):
                said = f"it answered {type(answer).__name__}, not a message or None"
                self._repeats.failed(name, "read filter", said)
                PLUGIN_FAILURES.labels(name, "read_filter", "raised").inc()
                return failed(name, "read filter")
            PLUGIN_READS_REFUSED.labels(name).inc()
            return cleaned(answer) or f"refused by the read filter '{name}'"
        return None
