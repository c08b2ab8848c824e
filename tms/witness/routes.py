"""The witness's HTTP interface (C2SP tlog-witness), on this server's own port:

    POST /witness/add-checkpoint              a log submits a checkpoint; 200 with the
                                              cosignature line, or the protocol's 400, 403,
                                              404, 409 (text/x.tlog.size), 422
    GET  /witness/key                         this witness's verifier key, plain text
    GET  /witness/<sha256(origin)>/checkpoint the last checkpoint cosigned of that log, with
                                              the cosignature (the monitoring view)

No authentication beyond the log's signature, as the protocol says; the body is bounded
(`tms.tlog.witness.MAX_BODY_BYTES`) and read within the HTTP door's limits. Anyone may post, so
`add-checkpoint` spends more of its address's rate budget than other requests
(`tms.guard.rates.ADD_CHECKPOINT_UNITS`), and what it refuses other than a 409 (the protocol's
everyday answer to a stale `old`) is noted in the refusal log like any door's refusals.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tms import metrics
from tms.errors import Refusal
from tms.http.bodies import small_body
from tms.tlog.witness import MAX_BODY_BYTES, NOTE_CONTENT_TYPE
from tms.witness.state import WitnessService

NO_STORE: Final = {"Cache-Control": "no-store"}
# How the refusal log files the protocol's refusals: a log key the witness does not trust (or a
# signature that fails) as a bad signature, the rest as invalid.
REFUSED: Final = {
    400: Refusal.INVALID,
    403: Refusal.BAD_SIGNATURE,
    404: Refusal.INVALID,
    422: Refusal.INVALID,
}


def _service(request: Request) -> WitnessService:
    service: WitnessService = request.app.state.runtime.witness
    return service


async def add_checkpoint(request: Request) -> Response:
    body = await small_body(request.scope, request.receive, MAX_BODY_BYTES)
    answer = await _service(request).add_checkpoint(body)
    metrics.WITNESSED.labels(str(answer.status)).inc()
    refused = REFUSED.get(answer.status)
    if refused is not None:
        request.app.state.runtime.services.refusals.record(refused, ADD_CHECKPOINT)
    # The content type exactly as given: a 409's `text/x.tlog.size` takes no charset (starlette
    # would add one to a text/* media type), as clients compare it whole.
    headers = {**NO_STORE, "Content-Type": answer.content_type}
    return Response(answer.body, answer.status, headers=headers)


async def key(request: Request) -> Response:
    witness = _service(request).key
    if witness is None:
        return PlainTextResponse("this server witnesses no log\n", 404, headers=NO_STORE)
    return PlainTextResponse(witness.verifier().encode() + "\n", media_type=NOTE_CONTENT_TYPE)


async def monitoring(request: Request) -> Response:
    note = await _service(request).latest(request.path_params["origin"])
    if note is None:
        return PlainTextResponse("no checkpoint of that log cosigned here\n", 404, headers=NO_STORE)
    return PlainTextResponse(note, media_type=NOTE_CONTENT_TYPE, headers=NO_STORE)


ADD_CHECKPOINT: Final = "witness add-checkpoint"  # its name in the refusal log, gate included

ROUTES: Final = [
    Route("/witness/add-checkpoint", add_checkpoint, methods=["POST"], name=ADD_CHECKPOINT),
    Route("/witness/key", key, methods=["GET"], name="witness key"),
    Route("/witness/{origin}/checkpoint", monitoring, methods=["GET"], name="witness checkpoint"),
]
