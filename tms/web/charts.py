"""Charts drawn on the server as SVG geometry, for the dashboard's templates: no script, no
external library, and the numbers are in the page as text for whoever cannot see the bars."""

from __future__ import annotations

from typing import Any, Final

from tms.results import Activity

WIDTH: Final = 720
HEIGHT: Final = 220
LEFT: Final = 40  # room for the y axis labels
BOTTOM: Final = 24  # room for the x axis labels
TOP: Final = 10
BAR_HEIGHT: Final = 22  # one row of a horizontal bar chart
MAX_BAR_WIDTH: Final = 40.0
BARS_WIDTH: Final = 360  # a horizontal bar chart sits in half a page


def activity(data: Activity) -> dict[str, Any]:
    """Vertical bars, one per bucket, on a y axis from 0 to the busiest bucket."""
    buckets = data["buckets"]
    peak = max((b["events"] for b in buckets), default=0)
    scale = _nice(peak)
    plot_width = WIDTH - LEFT - 8
    plot_height = HEIGHT - TOP - BOTTOM
    step = plot_width / max(1, len(buckets))
    bars = []
    for i, bucket in enumerate(buckets):
        height = plot_height * bucket["events"] / scale if scale else 0
        width = max(1.0, min(step * 0.8, MAX_BAR_WIDTH))
        bars.append(
            {
                "x": round(LEFT + i * step + (step - width) / 2, 2),
                "y": round(TOP + plot_height - height, 2),
                "width": round(width, 2),
                "height": round(height, 2),
                "label": f"{bucket['start']}: {bucket['events']} events",
            }
        )
    ticks = [
        {"y": round(TOP + plot_height - plot_height * f, 2), "value": round(scale * f)}
        for f in (0, 0.5, 1)
    ]
    labels = []
    if buckets:
        for i in sorted({0, len(buckets) // 2, len(buckets) - 1}):
            anchor = "start" if i == 0 else "end" if i == len(buckets) - 1 else "middle"
            x = (
                LEFT
                + i * step
                + (0 if anchor == "start" else step if anchor == "end" else step / 2)
            )
            labels.append({"x": round(x, 2), "text": buckets[i]["start"], "anchor": anchor})
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - 8,
        "baseline": TOP + plot_height,
        "bars": bars,
        "ticks": ticks,
        "labels": labels,
        "unit": data["unit"],
        "total": sum(b["events"] for b in buckets),
    }


def bars(items: list[tuple[str, int]]) -> dict[str, Any]:
    """Horizontal bars, one row per item, longest for the largest."""
    peak = max((value for _, value in items), default=0)
    label_width = 100
    room = BARS_WIDTH - label_width - 40
    rows = [
        {
            "y": i * BAR_HEIGHT,
            "label": label,
            "value": value,
            "width": round(room * value / peak, 2) if peak else 0,
        }
        for i, (label, value) in enumerate(items)
    ]
    return {
        "width": BARS_WIDTH,
        "height": max(BAR_HEIGHT, len(rows) * BAR_HEIGHT),
        "label_width": label_width,
        "rows": rows,
    }


def _nice(peak: int) -> int:
    """The axis top: the peak rounded up to 1, 2 or 5 times a power of ten."""
    if peak <= 0:
        return 0
    power = 1
    while True:
        for factor in (1, 2, 5):
            if factor * power >= peak:
                return factor * power
        power *= 10
