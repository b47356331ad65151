"""Runs the REST app with uvicorn on a background thread of the worker process."""

from __future__ import annotations

import logging
import threading
import time

import uvicorn
from fastapi import FastAPI

from rest.settings import RestSettings

log = logging.getLogger(__name__)


class RestServer:
    """uvicorn on a thread; the worker's main thread keeps signal handling."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        settings = getattr(app.state, "rest_settings", None) or RestSettings()
        tls = {}
        if settings.scheme == "https":
            tls = {
                "ssl_certfile": settings.ssl_certfile,
                "ssl_keyfile": settings.ssl_keyfile,
                "ssl_keyfile_password": settings.ssl_keyfile_password,
            }
        self.scheme = settings.scheme
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, lifespan="off", log_config=None, **tls  # type: ignore[arg-type]
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="rest-server", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 15.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"The REST server could not listen on {self.host}:{self.port} (is the port in use?)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"The REST server did not start on {self.host}:{self.port} within {timeout:.0f}s")
            time.sleep(0.02)
        log.info("REST API listening on %s://%s:%d", self.scheme, self.host, self.port)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
