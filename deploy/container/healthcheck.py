#!/usr/bin/env python3
"""The image's ``HEALTHCHECK``: ``GET /health`` on the worker's first REST listener; exit 0 only on 200.

The port and scheme come from ``listeners`` in the worker's properties (the file the entry point
wrote or the one mounted over it), so a worker moved to another port stays checked. A wildcard
host (``0.0.0.0``, ``::``) is asked on the loopback address. An HTTPS listener is asked without
verifying its certificate: the check runs inside the container, against the worker itself.

Copied into the image as ``/usr/local/bin/sluice-healthcheck``; standard library only, so it needs
neither curl nor the worker's packages.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

PROPERTIES = Path(os.environ.get("SLUICE_ENTRYPOINT_PROPERTIES", "/etc/sluice/worker.properties"))
DEFAULT_LISTENER = "http://0.0.0.0:8083"


def first_listener(properties: Path) -> str:
    """The first entry of ``listeners`` in ``properties`` (a simple reader: one ``key=value`` a line)."""
    try:
        text = properties.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return DEFAULT_LISTENER
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "listeners":
            return value.split(",")[0].strip() or DEFAULT_LISTENER
    return DEFAULT_LISTENER


def health_url(listener: str) -> str:
    """The ``/health`` URL of ``listener``, a wildcard host replaced by the loopback address."""
    parts = urlsplit(listener if "://" in listener else f"http://{listener}")
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme or 'http'}://{host}:{parts.port or 8083}/health"


def main() -> int:
    url = health_url(first_listener(PROPERTIES))
    context = ssl._create_unverified_context() if url.startswith("https:") else None  # noqa: S323 - own worker
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as response:  # noqa: S310 - fixed scheme
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
