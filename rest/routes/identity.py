"""``GET /auth/whoami``: the caller's principal and the roles it holds, for clients that adapt to them.

The web console hides the buttons a caller may not use; the server still decides every request
(:mod:`sluice.rest.authz`). A grant is reported as its role, the connector-name pattern it covers
and the permissions that role carries; its topic and group scopes stay out (they concern what a
connector may reach, not what the caller may click).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sluice.rest.authz import AccessPolicy
from sluice.rest.errors import ERROR_RESPONSES

router = APIRouter(prefix="/auth", tags=["worker"], responses=ERROR_RESPONSES)


@router.get("/whoami", summary="The caller's principal and roles")
def whoami(request: Request) -> dict[str, Any]:
    """``principal`` (``null`` without authentication), ``authenticated``, ``roles_enforced``
    (``false``: every caller may do everything) and ``grants``, each ``{role, pattern, permissions}``;
    a grant on pattern ``*`` also opens the worker-wide routes (plugins, validation, metrics, backfills)."""
    policy: AccessPolicy = request.app.state.access_policy
    principal = getattr(request.state, "principal", None)
    grants = policy.grants_of(principal)
    return {
        "principal": principal,
        "authenticated": principal is not None,
        "roles_enforced": policy.grants is not None,
        "grants": [
            {
                "role": grant.role.value,
                "pattern": grant.pattern,
                "permissions": sorted(p.value for p in grant.role.permissions),
            }
            for grant in grants
        ],
    }
