"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from sluice.rest.audit import AuditTrail
from sluice.rest.authn import Authenticator
from sluice.rest.authz import AccessControlMiddleware, AccessPolicy
from sluice.rest.errors import install_error_handlers
from sluice.rest.logger_levels import LoggerLevels
from sluice.rest.middleware import ConnectorLogContextMiddleware, RequestHeadersMiddleware, RequestLimitsMiddleware
from sluice.rest.routes import backfills as backfill_routes
from sluice.rest.routes import (
    connectors,
    console,
    dead_letters,
    identity,
    loggers,
    metrics,
    offsets,
    plugins,
    root,
    tap,
)
from sluice.rest.settings import RestSettings
from sluice.worker.backfill import BackfillManager
from sluice.worker.herder import Herder
from sluice.worker.observability.metrics import MetricsCollector

#: What a ``metrics.listeners`` listener serves.
METRICS_LISTENER_PATHS = frozenset({"/metrics", "/health"})


def metrics_only(app: FastAPI) -> ASGIApp:
    """``app`` as ``metrics.listeners`` serves it: ``/metrics`` and ``/health`` pass (through the
    same authentication and access rules as on the REST listener), any other path is 404."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in METRICS_LISTENER_PATHS:
            message = "Not found: this listener (metrics.listeners) serves only /metrics and /health"
            await JSONResponse({"error_code": 404, "message": message}, status_code=404)(scope, receive, send)
            return
        await app(scope, receive, send)

    return serve


def create_app(
    herder: Herder, settings: RestSettings | None = None, *, backfills: BackfillManager | None = None
) -> FastAPI:
    """The Kafka Connect REST surface over ``herder``, and ``/backfills`` over ``backfills`` (the
    herder's manager, which the herder starts and stops; without one the app serves no ``/backfills``).

    ``settings`` default to those in the herder's worker configuration (see :mod:`sluice.rest.settings`);
    roles (:mod:`sluice.rest.authz`) and the audit topic (:mod:`sluice.rest.audit`) are always read from it.
    """
    raw = herder.worker_settings()
    settings = settings or RestSettings.from_worker_config(raw)
    # Before anything starts: a malformed rest.auth.roles must stop the worker, not open it.
    policy = AccessPolicy.from_worker_config(raw, auth_enabled=settings.auth_enabled)
    authenticator = Authenticator(settings)
    audit = AuditTrail.from_worker_config(raw)
    app = FastAPI(
        title="Sluice",
        description="Kafka Connect compatible REST API of a Sluice worker",
        version=root.SLUICE_VERSION,
    )
    app.state.herder = herder
    app.state.rest_settings = settings
    app.state.logger_levels = LoggerLevels()
    app.state.access_policy = policy
    app.state.metrics = MetricsCollector(herder)
    app.state.backfills = backfills
    install_error_handlers(app)
    app.include_router(root.router)
    app.include_router(metrics.router)
    app.include_router(connectors.router)
    app.include_router(offsets.router)
    app.include_router(dead_letters.router)
    app.include_router(tap.router)
    app.include_router(plugins.router)
    app.include_router(loggers.router)
    app.include_router(identity.router)
    app.include_router(console.router)
    if backfills is not None:
        app.include_router(backfill_routes.router)
    # Added last = runs first: unauthenticated clients are refused before their body is read.
    app.add_middleware(ConnectorLogContextMiddleware)
    app.add_middleware(RequestHeadersMiddleware)
    app.add_middleware(
        RequestLimitsMiddleware, max_bytes=settings.max_request_bytes, body_timeout_s=settings.request_body_timeout_ms / 1000
    )
    # Always on: without authentication it still refuses routes that have no access rule and audits.
    app.add_middleware(
        AccessControlMiddleware,
        routes=app.router.routes,
        authenticator=authenticator,
        auth_enabled=settings.auth_enabled,
        policy=policy,
        audit=audit,
    )
    return app
