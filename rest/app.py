"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI

from rest.errors import install_error_handlers
from rest.logger_levels import LoggerLevels
from rest.middleware import AuthMiddleware, RequestHeadersMiddleware, RequestLimitsMiddleware
from rest.routes import backfills, connectors, loggers, offsets, plugins, root
from rest.settings import RestSettings
from worker.herder import Herder


def create_app(herder: Herder, settings: RestSettings | None = None) -> FastAPI:
    """The Kafka Connect REST surface over ``herder``.

    ``settings`` default to those in the herder's worker configuration (see :mod:`rest.settings`).
    """
    settings = settings or RestSettings.from_worker_config(herder.worker_settings())
    app = FastAPI(
        title="Sluice",
        description="Kafka Connect compatible REST API of a Sluice worker",
        version=root.SLUICE_VERSION,
    )
    app.state.herder = herder
    app.state.rest_settings = settings
    app.state.logger_levels = LoggerLevels()
    install_error_handlers(app)
    app.include_router(root.router)
    app.include_router(connectors.router)
    app.include_router(offsets.router)
    app.include_router(plugins.router)
    app.include_router(loggers.router)
    backfills.install(app, herder)
    # Added last = runs first: unauthenticated clients are refused before their body is read.
    app.add_middleware(RequestHeadersMiddleware)
    app.add_middleware(RequestLimitsMiddleware, max_bytes=settings.max_request_bytes)
    if settings.auth_enabled:
        app.add_middleware(AuthMiddleware, settings=settings)
    return app
