"""The dashboard's activity chart, as geometry: what a reader would see misplaced."""

from __future__ import annotations

import pytest

from tms.pages import charts
from tms.results import Activity


def activity(counts: list[int]) -> Activity:
    return {
        "unit": "day",
        "buckets": [{"start": f"2026-12-{i + 1:02d}", "events": n} for i, n in enumerate(counts)],
    }


@pytest.mark.parametrize("width", [charts.WIDTH, charts.NARROW_WIDTH])
def test_a_lone_days_date_sits_under_its_bar(width: int) -> None:
    chart = charts.activity(activity([6]), width)
    (bar,) = chart["bars"]
    (label,) = chart["labels"]
    assert chart["width"] == width and chart["right"] == width - 8
    assert label["anchor"] == "middle"
    assert label["x"] == pytest.approx(bar["x"] + bar["width"] / 2)
    assert bar["label"] == "2026-12-01: 6 events"


@pytest.mark.parametrize("width", [charts.WIDTH, charts.NARROW_WIDTH])
def test_a_month_of_bars_and_its_labels_stay_inside_the_chart(width: int) -> None:
    chart = charts.activity(activity([i % 7 for i in range(30)]), width)
    assert len(chart["bars"]) == 30
    for bar in chart["bars"]:
        assert chart["left"] <= bar["x"] and bar["x"] + bar["width"] <= chart["right"]
    for label in chart["labels"]:
        half = len(label["text"]) * charts.CHAR_WIDTH / 2
        assert half <= label["x"] <= width - half
    assert chart["bars"][1]["label"] == "2026-12-02: 1 event"
    assert [t["value"] for t in chart["ticks"]] == [0, 5, 10]


@pytest.mark.parametrize(
    ("counts", "ticks"),
    [
        ([0], [0, 1]),
        ([], [0, 1]),
        ([1, 0], [0, 1]),
        ([2], [0, 1, 2]),
        ([3], [0, 5]),
        ([7], [0, 5, 10]),
    ],
)
def test_the_y_axis_counts_in_whole_numbers_each_once(counts: list[int], ticks: list[int]) -> None:
    chart = charts.activity(activity(counts))
    assert [t["value"] for t in chart["ticks"]] == ticks
    assert all(isinstance(t["value"], int) for t in chart["ticks"])
    assert chart["ticks"][-1]["y"] == charts.TOP  # the top tick at the top of the plot
