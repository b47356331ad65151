"""Throughput benchmarks: each prints its figures and the ratio against a raw limit measured in the same run.

``python -m benchmarks.<name> --help`` prints that benchmark's description and the environment
variables it reads, without running it (a benchmark takes no other arguments: its knobs are
``SLUICE_BENCH_*`` variables, so ``make bench`` and CI set them the same way).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys

_KNOB = re.compile(r"SLUICE_BENCH_[A-Z0-9_]+")


def _help(argv: list[str]) -> str | None:
    """The help of ``python -m benchmarks.<name> --help`` (``None``: not asked for)."""
    if "-m" not in argv:
        return None
    at = argv.index("-m")
    if at + 1 >= len(argv) or not argv[at + 1].startswith("benchmarks.") or not {"-h", "--help"} & set(argv[at + 2 :]):
        return None
    name = argv[at + 1]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return f"No benchmark {name}"
    with open(spec.origin, encoding="utf-8") as source:
        text = source.read()
    knobs = set(_KNOB.findall(text))
    # What it takes from benchmarks.common: the record count, the rounds and the broker's address.
    for used, knob in (("RECORDS", "RECORDS"), ("ROUNDS", "ROUNDS"), ("broker", "BOOTSTRAP")):
        if re.search(rf"\b{used}\b", text):
            knobs.add(f"SLUICE_BENCH_{knob}")
    doc = ast.get_docstring(ast.parse(text)) or "(no description)"
    lines = [f"usage: python -m {name}", "", doc, "", "Environment variables it reads:"]
    lines += [f"  {knob}" for knob in sorted(knobs)] or ["  (none)"]
    lines += ["", "It needs the services it names (a Kafka broker it starts itself, or SLUICE_BENCH_BOOTSTRAP)."]
    return "\n".join(lines)


_ASKED = _help(list(getattr(sys, "orig_argv", [])))
if _ASKED is not None:
    print(_ASKED)
    raise SystemExit(0)
