"""`GET /metrics`: the Prometheus emitter's registry in Prometheus' text format, on every role.

Druid's prometheus-emitter serves on a port of its own; here the node's HTTP server serves it, so a
scrape config needs one address per process, not two.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from sluice.emitter import Emitter, ServiceEmitter, prometheus_registry
from sluice.server.auth import state_guard


def metrics_router(source: Emitter | ServiceEmitter | CollectorRegistry) -> APIRouter:
    """Serve `source`'s registry: a CollectorRegistry as is, or the one of the Prometheus emitter inside an
    emitter. Without one, `/metrics` answers 404 with the setting that turns it on. The format follows the
    scraper's Accept header (Prometheus text 0.0.4 by default, OpenMetrics when asked for)."""
    registry = source if isinstance(source, CollectorRegistry) else prometheus_registry(source)
    router = APIRouter(dependencies=[state_guard()])  # a scraper authenticates, or druid.auth.unsecuredPaths lists it

    @router.get("/metrics")
    def metrics(request: Request) -> Response:
        if registry is None:
            return JSONResponse({"error": "no Prometheus emitter is configured; set the emitter type to "
                                          "\"prometheus\" (or list it in a composing emitter's emitters)"},
                                status_code=404)
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), headers={"Content-Type": content_type})

    return router
