"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI

from rest.errors import install_error_handlers
from rest.routes import connectors, plugins, root
from worker.herder import Herder


def create_app(herder: Herder) -> FastAPI:
    """The Kafka Connect REST surface over ``herder``."""
    app = FastAPI(
        title="Sluice",
        description="Kafka Connect compatible REST API of a Sluice worker",
        version=root.SLUICE_VERSION,
    )
    app.state.herder = herder
    install_error_handlers(app)
    app.include_router(root.router)
    app.include_router(connectors.router)
    app.include_router(plugins.router)
    return app
