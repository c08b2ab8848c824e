"""Charts drawn on the server as SVG geometry, for the dashboard's templates: no script, no
external library, and the numbers are in the page as text for whoever cannot see the bars."""

from __future__ import annotations

from typing import Any, Final

from tms.results import Activity

WIDTH: Final = 720
# Drawn too, for phones: no wider than a 390 px phone's panel (316 px), so the 12px labels are
# drawn at 12px or more there, not shrunk (360 wide, they came out at 10 px and less).
NARROW_WIDTH: Final = 300
HEIGHT: Final = 220
LEFT: Final = 40  # room for the y axis labels
BOTTOM: Final = 24  # room for the x axis labels
TOP: Final = 10
BAR_HEIGHT: Final = 22  # one row of a horizontal bar chart
MAX_BAR_WIDTH: Final = 40.0
BARS_WIDTH: Final = 300  # half a page, or a phone's panel: never drawn wider than this (tms.css)
CHAR_WIDTH: Final = 7.2  # a 12px axis label's average character width, to keep it in view


def activity(data: Activity, width: int = WIDTH) -> dict[str, Any]:
    """Vertical bars, one per bucket, on a y axis from 0 to the busiest bucket. An SVG scales
    its text with it, so a phone gets a chart drawn `NARROW_WIDTH` wide rather than the wide
    one shrunk."""
    buckets = data["buckets"]
    peak = max((b["events"] for b in buckets), default=0)
    scale = _nice(peak)
    plot_width = width - LEFT - 8
    plot_height = HEIGHT - TOP - BOTTOM
    step = plot_width / max(1, len(buckets))
    bars = []
    for i, bucket in enumerate(buckets):
        height = plot_height * bucket["events"] / scale if scale else 0
        bar = max(1.0, min(step * 0.8, MAX_BAR_WIDTH))
        bars.append(
            {
                "x": round(LEFT + i * step + (step - bar) / 2, 2),
                "y": round(TOP + plot_height - height, 2),
                "width": round(bar, 2),
                "height": round(height, 2),
                "label": f"{bucket['start']}: {_events(bucket['events'])}",
            }
        )
    # Counts: whole numbers only, each once. An empty chart's axis runs to 1; a top of 1 or 5
    # gets no tick halfway, where no whole number is.
    top = max(scale, 1)
    ticks = [
        {"y": round(TOP + plot_height - plot_height * value / top, 2), "value": value}
        for value in ([0, top] if top % 2 else [0, top // 2, top])
    ]
    labels = []
    if buckets:
        for i in sorted({0, len(buckets) // 2, len(buckets) - 1}):
            # Under its bar, centred, but kept inside the chart: a lone day's date sits under
            # its one bar, not at the axis's far end.
            text = buckets[i]["start"]
            half = len(text) * CHAR_WIDTH / 2
            centre = LEFT + i * step + step / 2
            x = min(max(centre, half), width - half)
            labels.append({"x": round(x, 2), "text": text, "anchor": "middle"})
    return {
        "width": width,
        "height": HEIGHT,
        "left": LEFT,
        "right": width - 8,
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


def _events(count: int) -> str:
    return f"{count:,} event{'' if count == 1 else 's'}"


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
