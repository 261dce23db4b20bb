"""uvicorn in a background thread, so the Lifecycle (not uvicorn) owns signals and shutdown order."""

from __future__ import annotations

import threading
import time

import uvicorn
from fastapi import FastAPI


class HttpServer:
    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                     lifespan="off", access_log=False))
        self._thread = threading.Thread(target=self._server.run, name="http", daemon=True)

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start (is the port already in use?)")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
