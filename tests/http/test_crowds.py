"""The crowds the connection caps choose from (`tms.http.crowds`): whatever sequence of
arrivals, departures and authentications, each group's size, the largest of them and each
connection's weight are what counting them all would give."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tms.http.crowds import Crowds, groups_of


@dataclass(eq=False)
class Conn:
    address: str | None
    key: str | None = None
    opened: float = field(default=0.0)


ADDRESSES = st.sampled_from(["a", "b", "c", None])
KEYS = st.sampled_from(["k1", "k2", None])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), ADDRESSES, KEYS),
        st.tuples(st.just("remove"), st.integers(0, 30), st.none()),
        st.tuples(st.just("key"), st.integers(0, 30), KEYS),
    ),
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(STEPS)
def test_the_sizes_and_the_largest_are_what_counting_gives(steps: list[tuple]) -> None:
    crowds = Crowds()
    made: list[Conn] = []
    for n, (what, first, second) in enumerate(steps):
        if what == "add":
            conn = Conn(first, None, float(n))
            made.append(conn)
            crowds.add(conn)
            crowds.set_key(conn, second)
        elif made:
            conn = made[first % len(made)]
            if what == "remove":
                crowds.remove(conn)
            else:
                crowds.set_key(conn, second)
        counted: dict[tuple[str, str], int] = {}
        for member in crowds.members:
            for group in groups_of(member):
                counted[group] = counted.get(group, 0) + 1
        assert {group: crowds.size(group) for group in counted} == counted
        assert set(crowds.groups) == set(counted)
        assert crowds.top == max(counted.values(), default=0)
        heaviest = list(crowds.heaviest())
        assert all(crowds.weight(member) == crowds.top for member in heaviest)
        assert bool(heaviest) == bool(crowds.top)


def test_a_keys_crowd_over_many_addresses_outweighs_one_member() -> None:
    crowds = Crowds()
    crowd = [Conn(f"10.0.0.{n}", "attacker", float(n)) for n in range(10)]
    member = Conn("10.0.1.1", "member", 100.0)
    for conn in [*crowd, member]:
        crowds.add(conn)
    assert crowds.top == 10
    assert crowds.weight(member) == 1
    assert next(crowds.heaviest()) is crowd[0]  # the oldest of the crowd


def test_when_every_group_holds_one_the_oldest_is_the_heaviest() -> None:
    crowds = Crowds()
    singles = [Conn(f"10.0.{n // 250}.{n % 250}", None, float(n)) for n in range(200)]
    for conn in singles:
        crowds.add(conn)
    crowds.remove(singles[0])
    assert crowds.top == 1
    assert next(crowds.heaviest()) is singles[1]
