"""uvicorn in background threads, so the Lifecycle (not uvicorn) owns signals and shutdown order: one server on the
plaintext port, and one on the TLS port when the node has one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI


class HttpServer:
    def __init__(self, app: FastAPI, host: str, port: int, tls: tuple[int, Path, Path] | None = None) -> None:
        """`tls`: the TLS port, with the PEM certificate chain and key it serves."""
        configs = [uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", access_log=False)]
        if tls is not None:
            tls_port, certificate, key = tls
            configs.append(uvicorn.Config(app, host=host, port=tls_port, log_level="warning", lifespan="off",
                                          access_log=False, ssl_certfile=str(certificate), ssl_keyfile=str(key)))
        self._servers = [uvicorn.Server(config) for config in configs]
        self._threads = [threading.Thread(target=server.run, name="http", daemon=True) for server in self._servers]

    def start(self, timeout: float = 30.0) -> None:
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + timeout
        for server, thread in zip(self._servers, self._threads):
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the HTTP server did not start on port {server.config.port} (is it already "
                                       "in use?)")
                time.sleep(0.05)

    def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        for thread in self._threads:
            if thread.is_alive():
                thread.join(10)
