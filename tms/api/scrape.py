"""`GET /metrics`: this process's figures (`tms.metrics`) for a Prometheus scraper, on the public
port behind `TMS_METRICS_TOKEN`, or on a port of their own (`TMS_METRICS_PORT`), without one.

On the public port the route is there only when a token is set (else the 404 of any unknown
path), and answers only a bearer of that token: anyone else gets a 401, noted in the refusal log
like any credentials that do not hold up. The token is compared in constant time.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.exposition import choose_encoder
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tms import metrics
from tms.api.routes import runtime_of
from tms.config import Settings
from tms.http.statuses import Refused
from tms.pages.door import PRIVATE
from tms.runtime import Runtime

log = logging.getLogger(__name__)

NEEDS_TOKEN: Final = "metrics need Authorization: Bearer <TMS_METRICS_TOKEN>"


async def metrics_text(request: Request) -> Response:
    """The figures, in the format the scraper asks for (Prometheus' text, or OpenMetrics), as
    the library's own listener chooses it."""
    settings: Settings = request.app.state.settings
    if settings.metrics_token is None:
        raise HTTPException(404)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), settings.metrics_token.encode()
    ):
        raise Refused(401, NEEDS_TOKEN, {"WWW-Authenticate": 'Bearer realm="metrics"'})
    await metrics.refresh(runtime_of(request).ledger.pool)
    encode, media_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(REGISTRY), headers={**PRIVATE, "Content-Type": media_type})


ROUTES: Final = [Route("/metrics", metrics_text, methods=["GET"], name="metrics")]


@asynccontextmanager
async def metrics_port(settings: Settings, runtime: Runtime) -> AsyncIterator[None]:
    """With `TMS_METRICS_PORT`, the metrics on a listener of their own (prometheus_client's,
    in a thread), without a token: for a scraper on a private network. A port that cannot be
    bound stops start-up. The embedding queue's depth is refreshed in the background meanwhile,
    since that thread cannot ask the database itself."""
    if settings.metrics_port is None:
        yield
        return
    server, thread = start_http_server(settings.metrics_port, settings.metrics_host)
    refresher = asyncio.create_task(
        metrics.refresh_forever(runtime.ledger.pool), name="tms-metrics"
    )
    # `tms serve` says where in its start-up summary (`tms.cli.server.enabled`)
    log.debug("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    try:
        yield
    finally:
        refresher.cancel()
        await asyncio.gather(refresher, return_exceptions=True)
        server.shutdown()
        server.server_close()
        thread.join(5)
