"""Pieces shared by the S3 sink and the S3 source: storage, formats, partitioners, object layout.

Depends only on :mod:`sluice.connectors.api` plus the ``s3`` extra (boto3, pyarrow, fastavro), and imports
those lazily with an error that names the ``pip install`` to run.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sluice.connectors.api import ConfigError

INSTALL_HINT = "pip install 'sluice[s3]'"


def require_module(name: str, what: str) -> ModuleType:
    """Import ``name`` or raise a :class:`ConfigError` telling the user which extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"{what} needs the Python package {name.split('.')[0]!r}: {INSTALL_HINT} ({exc})") from None
