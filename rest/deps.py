"""Dependency aliases shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sluice.worker.herder import Herder


def _herder(request: Request) -> Herder:
    return request.app.state.herder  # type: ignore[no-any-return]


HerderDep = Annotated[Herder, Depends(_herder)]
