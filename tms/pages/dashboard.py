"""The dashboard: activity over time, records by kind, contributors and sources, over the
collections the key reads (or one of them), drawn as SVG on the server (`tms.pages.charts`)."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tms.pages import charts
from tms.pages.door import door_of, page, services_of


@page
async def dashboard(request: Request) -> Response:
    door = door_of(request)
    _, reader = await door.reader(request)
    chosen = request.query_params.get("c")
    stats = await services_of(request).stats.dashboard(reader, chosen)
    return await door.render(
        request,
        "dashboard.html",
        collections=reader.slugs,
        chosen=chosen if chosen is not None and reader.may_read(chosen) else None,
        stats=stats,
        charts=[
            ("wide", charts.activity(stats["activity"])),
            ("narrow", charts.activity(stats["activity"], charts.NARROW_WIDTH)),
        ],
        kinds_chart=charts.bars([(k["kind_name"], k["events"]) for k in stats["kinds"]]),
    )


GET: Final = ["GET"]

ROUTES: Final = [
    Route("/dashboard", dashboard, methods=GET, name="dashboard"),
]
