"""The web console's static shell at /ui and ``GET /auth/whoami``, the roles it adapts to.

The browser tests (tests/integration/test_console.py) drive the pages; these check what the server
hands out: the files and only them, without credentials, under a policy that runs no inline code.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from sluice.rest.routes.console import ASSETS

USERS = "admin:a-pw,viewer:v-pw,scoped:s-pw,nobody:n-pw"
ROLES = "admin:admin,viewer:viewer,scoped:operator:orders-*,scoped:viewer:billing"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def secured(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client(**{"rest.auth.basic.users": USERS, "rest.auth.roles": ROLES})


def test_the_shell_is_served_without_credentials_under_a_strict_policy(secured: TestClient) -> None:
    redirect = secured.get("/ui", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "/ui/"
    page = secured.get("/ui/")
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="app.js">' in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
    script = secured.get("/ui/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.headers["x-content-type-options"] == "nosniff"
    # The data is not: the API still asks.
    assert secured.get("/connectors").status_code == 401


@pytest.mark.parametrize(
    "path", ["/ui/nothing.js", "/ui/..%2Fapp.py", "/ui/%2e%2e", "/ui/__init__.py", "/ui/sub/app.js"]
)
def test_only_the_console_files_are_served(secured: TestClient, path: str) -> None:
    response = secured.get(path)
    assert response.status_code in (401, 404), (path, response.status_code)
    assert "import" not in response.text


def test_every_module_the_page_loads_is_shipped_and_none_writes_markup() -> None:
    assert {"index.html", "console.css", "app.js"} <= set(ASSETS)
    for name, (content, _) in ASSETS.items():
        text = content.decode()
        for imported in re.findall(r'from "\./([\w.-]+)"', text) + re.findall(r'src="([\w.-]+)"', text):
            assert imported in ASSETS, f"{name} loads {imported}, which is not shipped"
        # Values from the API go in as text: no markup is ever built from strings.
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, f"{name} uses {sink}"


def test_whoami_names_the_principal_and_its_grants(secured: TestClient) -> None:
    admin = secured.get("/auth/whoami", headers=_basic("admin", "a-pw")).json()
    assert admin == {
        "principal": "admin",
        "authenticated": True,
        "roles_enforced": True,
        "grants": [{"role": "admin", "pattern": "*", "permissions": ["admin", "operate", "view"]}],
    }
    scoped = secured.get("/auth/whoami", headers=_basic("scoped", "s-pw")).json()
    assert scoped["grants"] == [
        {"role": "operator", "pattern": "orders-*", "permissions": ["operate", "view"]},
        {"role": "viewer", "pattern": "billing", "permissions": ["view"]},
    ]
    assert secured.get("/auth/whoami").status_code == 401
    assert secured.get("/auth/whoami", headers=_basic("viewer", "wrong")).status_code == 401
    refused = secured.get("/auth/whoami", headers=_basic("nobody", "n-pw"))
    assert refused.status_code == 403 and "no role" in refused.json()["message"]


def test_whoami_without_authentication_is_an_admin_on_everything(make_client: Callable[..., TestClient]) -> None:
    body = make_client().get("/auth/whoami").json()
    assert body["principal"] is None and body["authenticated"] is False and body["roles_enforced"] is False
    assert body["grants"] == [{"role": "admin", "pattern": "*", "permissions": ["admin", "operate", "view"]}]


def test_the_consoles_calls_get_no_basic_challenge(make_client: Callable[..., TestClient]) -> None:
    """The console calls with the browser's credentials (a client certificate): a Basic challenge
    on those would open the browser's own sign-in dialog, so they get none; other callers do."""
    secured = make_client(**{"rest.auth.basic.users": USERS, "rest.auth.bearer.tokens": "ops:t0ken"})
    plain = secured.get("/connectors")
    assert plain.status_code == 401 and plain.headers["www-authenticate"] == 'Basic realm="sluice", Bearer realm="sluice"'
    console = secured.get("/connectors", headers={"X-Sluice-Console": "1"})
    assert console.status_code == 401 and console.headers["www-authenticate"] == 'Bearer realm="sluice"'
    basic_only = make_client(**{"rest.auth.basic.users": USERS}).get("/connectors", headers={"X-Sluice-Console": "1"})
    assert basic_only.status_code == 401 and "www-authenticate" not in basic_only.headers
    assert basic_only.json()["message"]  # the console shows its own form with this message
    assert secured.get("/connectors", headers={"X-Sluice-Console": "1", **_basic("admin", "a-pw")}).status_code == 200
