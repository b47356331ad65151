"""What a standalone worker costs at rest and at work: memory and CPU of its whole process tree, beside
the file source's throughput with one busy task and with two.

A real ``sluice standalone`` runs as a subprocess (``task.executor=process``, as the command runs
it). Figures, per executor:

* distinct resident memory: every resident page of the worker's process tree (worker, fork
  server, task hosts, …) counted once, by its physical frame (``/proc/<pid>/pagemap``), so pages a
  fork shares and shared libraries count once however many processes map them (PSS, printed
  beside it, also divides pages shared with processes outside the tree);
* CPU: user + system seconds the tree used over 10 s (``/proc/<pid>/stat``);

with 0 connectors, with 10 idle FileStreamSource connectors (their files exist and stay empty)
and with 10 busy ones (their files grow by 10,000 lines a second each, ``BUSY_LINES_S``); then the
rate of one FileStreamSource reading ``SLUICE_BENCH_RECORDS`` lines, and of two at once (median
of ``SLUICE_BENCH_ROUNDS``).

Run: ``python -m benchmarks.memory``. ``SLUICE_BENCH_BEFORE_TREE=/path/to/checkout`` also runs
the worker of that checkout (e.g. ``git archive`` of the commit before) and prints before and
after side by side (``SLUICE_BENCH_AFTER_TREE`` replaces this checkout as "after");
``SLUICE_BENCH_MEMORY_RATES=0`` prints the memory and CPU figures only. Targets (issues #26, #39):
10 idle connectors at most 200 MB distinct resident and under 0.1 CPU-s per 10 s; two busy tasks
no slower than before. Printed, never asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, TopicPartition

from benchmarks.common import RECORD_BYTES, RECORDS, ROUNDS, broker, create_topic, make_lines, tmpdir

IDLE_CONNECTORS = 10
RATES = os.environ.get("SLUICE_BENCH_MEMORY_RATES", "1") != "0"
WINDOW_S = 10.0
BUSY_LINES_S = 10_000
REPO = Path(__file__).resolve().parents[1]


# -- the process tree ----------------------------------------------------------------------------


def tree(root: int) -> list[int]:
    """``root`` and every live descendant of it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def pss_mb(root: int) -> tuple[float, int]:
    """PSS of the tree in MB, and how many processes it has."""
    total_kb, count = 0, 0
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total_kb += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            count += 1
        except OSError:
            continue
    return total_kb / 1024, count


def distinct_mb(root: int) -> float:
    """Resident memory of the tree in MB counting each physical page once, however many of the
    tree's processes map it (a fork's shared pages, shared libraries): the distinct page frame
    numbers of every resident page in ``/proc/<pid>/pagemap``, over the regions ``smaps`` shows
    resident. Unlike PSS, it does not move with what processes outside the tree map. Needs
    ``CAP_SYS_ADMIN`` to see frame numbers (as root); without it, ``nan``.
    """
    import numpy as np

    page = os.sysconf("SC_PAGE_SIZE")
    frames: list[Any] = []
    for pid in tree(root):
        try:
            regions = _resident_regions(pid)
            with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
                for start, end in regions:
                    pagemap.seek(start // page * 8)
                    entries = np.frombuffer(pagemap.read((end - start) // page * 8), dtype=np.uint64)
                    present = entries[(entries >> np.uint64(63)) == 1]
                    frames.append(present & np.uint64((1 << 55) - 1))
        except OSError:
            continue  # the process ended meanwhile
    if not frames:
        return 0.0
    every = np.concatenate(frames)
    if every.size and not every.any():
        return float("nan")  # frame numbers hidden (no CAP_SYS_ADMIN)
    return int(np.unique(every).size) * page / 1024 / 1024


def _resident_regions(pid: int) -> list[tuple[int, int]]:
    """The address ranges of ``pid`` with resident pages (``Rss`` above 0 in ``smaps``)."""
    regions: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = head.split("-")
                current = (int(lo, 16), int(hi, 16))
            elif head == "Rss:" and current is not None and int(line.split()[1]) > 0:
                regions.append(current)
    return [r for r in regions if r[0] < 1 << 47]  # [vsyscall] lies above user space


def cpu_s(root: int) -> dict[int, float]:
    """User + system CPU seconds of each process of the tree."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def measure(root: int, seconds: float = WINDOW_S) -> tuple[float, float, float, int]:
    """(distinct resident MB and PSS MB at the end, CPU seconds used over ``seconds``, processes):
    processes alive at both ends."""
    before = cpu_s(root)
    time.sleep(seconds)
    after = cpu_s(root)
    used = sum(after[p] - before[p] for p in after if p in before)
    pss, count = pss_mb(root)
    return distinct_mb(root), pss, used, count


# -- a worker ------------------------------------------------------------------------------------


@contextmanager
def standalone(tree_root: Path, bootstrap: str, workdir: Path) -> Iterator[tuple[int, str]]:
    """``sluice standalone`` of the checkout at ``tree_root``: its pid and REST address."""
    port = _free_port()
    props = workdir / "worker.properties"
    props.write_text(
        f"bootstrap.servers={bootstrap}\nlisteners=http://127.0.0.1:{port}\n"
        f"offset.storage.file.filename={workdir / 'offsets.json'}\noffset.flush.interval.ms=10000\n"
        "key.converter=StringConverter\nvalue.converter=StringConverter\ntask.executor=process\n"
        # The connectors' files, apart from the worker's own (sandboxed task hosts reach only these).
        f"connector.allowed.paths={workdir / 'data'}\n"
    )
    (workdir / "data").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree_root)}
    log = (workdir / "worker.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "standalone", str(props)], cwd=tree_root, env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _healthy(url), 60, "the worker to answer")
        yield proc.pid, url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/connectors", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(predicate: Any, timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(poll)


def add_source(url: str, name: str, path: Path, topic: str) -> None:
    config = {"connector.class": "FileStreamSource", "file": str(path), "topic": topic}
    r = httpx.put(f"{url}/connectors/{name}/config", json=config, timeout=60)
    r.raise_for_status()

    def running() -> bool:
        body = httpx.get(f"{url}/connectors/{name}/status", timeout=10).json()
        return [t.get("state") for t in body.get("tasks", [])] == ["RUNNING"]

    _wait(running, 60, f"{name} to run", poll=0.1)


def delete_all(url: str) -> None:
    for name in httpx.get(f"{url}/connectors", timeout=10).json():
        httpx.delete(f"{url}/connectors/{name}", timeout=60)


# -- the scenarios -------------------------------------------------------------------------------


def rest_figures(pid: int, url: str, bootstrap: str, workdir: Path) -> dict[str, tuple[float, float, float, int]]:
    """Distinct resident pages, PSS and CPU with 0, 10 idle and 10 busy connectors."""
    out = {"0 connectors": (time.sleep(3), measure(pid))[1]}
    files = [workdir / "data" / f"idle-{i}.txt" for i in range(IDLE_CONNECTORS)]
    for i, path in enumerate(files):
        path.touch()
        add_source(url, f"idle-{i}", path, create_topic(bootstrap, f"mem-{os.getpid()}-{workdir.name}-{i}"))
    time.sleep(5)  # start-up work done
    out[f"{IDLE_CONNECTORS} idle connectors"] = measure(pid)
    stop = threading.Event()
    writer = threading.Thread(target=_append_lines, args=(files, stop), daemon=True)
    writer.start()
    time.sleep(2)
    out[f"{IDLE_CONNECTORS} busy connectors"] = measure(pid)
    stop.set()
    for key, (distinct, pss, cpu, count) in out.items():
        print(
            f"  {key}: {distinct:.0f} MB distinct resident ({pss:.0f} MB PSS), {cpu:.2f} CPU-s per {WINDOW_S:.0f} s, "
            f"{count} processes",
            flush=True,
        )
    writer.join()
    delete_all(url)
    return out


def _append_lines(files: list[Path], stop: threading.Event) -> None:
    line = b"x" * (RECORD_BYTES - 1) + b"\n"
    handles = [p.open("ab") for p in files]
    tick = 0.02
    chunk = line * int(BUSY_LINES_S * tick)
    next_at = time.monotonic()
    while not stop.is_set():
        for h in handles:
            h.write(chunk)
            h.flush()
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    for h in handles:
        h.close()


def throughput(url: str, bootstrap: str, files: list[Path], records: int, run: str) -> float:
    """Records a second of ``len(files)`` FileStreamSource tasks at once, first record to last."""
    topics = [create_topic(bootstrap, f"tput-{os.getpid()}-{run}-{i}") for i in range(len(files))]
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-memory-watermarks"})
    try:

        def written() -> list[int]:
            return [watermarks.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] for t in topics]

        for i, (path, topic) in enumerate(zip(files, topics)):
            httpx.put(
                f"{url}/connectors/tput-{run}-{i}/config",
                json={"connector.class": "FileStreamSource", "file": str(path), "topic": topic},
                timeout=60,
            ).raise_for_status()
        _wait(lambda: any(n > 0 for n in written()), 120, "the first record", poll=0.02)
        started = time.monotonic()
        _wait(lambda: all(n >= records for n in written()), 600, "every record", poll=0.05)
        rate = records * len(files) / (time.monotonic() - started)
    finally:
        watermarks.close()
    delete_all(url)
    return rate


def figures(tree_root: Path, bootstrap: str) -> dict[str, Any]:
    with tmpdir() as d, standalone(tree_root, bootstrap, Path(d)) as (pid, url):
        workdir = Path(d)
        out: dict[str, Any] = rest_figures(pid, url, bootstrap, workdir)
        if not RATES:
            return out
        lines = b"\n".join(make_lines(RECORDS)) + b"\n"
        inputs = [workdir / "data" / f"input-{i}.txt" for i in range(2)]
        for path in inputs:
            path.write_bytes(lines)
        for tasks in (1, 2):
            rates = sorted(throughput(url, bootstrap, inputs[:tasks], RECORDS, f"{tree_root.name}-{tasks}-{run}") for run in range(ROUNDS))
            out[f"{tasks} busy task(s)"] = rates[len(rates) // 2]
            print(f"  {tree_root}: {tasks} busy task(s): " + "  ".join(f"{r:,.0f}" for r in rates) + " rec/s", flush=True)
        return out


def main() -> dict[str, dict[str, Any]]:
    trees = {"after": Path(os.environ.get("SLUICE_BENCH_AFTER_TREE") or REPO).resolve()}
    if os.environ.get("SLUICE_BENCH_BEFORE_TREE"):
        trees = {"before": Path(os.environ["SLUICE_BENCH_BEFORE_TREE"]).resolve(), **trees}
    print(f"memory and CPU of a standalone worker (task.executor=process); {RECORDS:,} lines, {ROUNDS} rounds per rate")
    results: dict[str, dict[str, Any]] = {}
    with broker() as bootstrap:
        for label, root in trees.items():
            results[label] = figures(root, bootstrap)
    _print(results)
    return results


def _print(results: dict[str, dict[str, Any]]) -> None:
    labels = list(results)
    print(f"\n{'':<26}" + "".join(f"{label:>34}" for label in labels))
    for key in results[labels[0]]:
        cells = []
        for label in labels:
            value = results[label][key]
            if isinstance(value, tuple):
                distinct, _pss, cpu, count = value
                cells.append(f"{distinct:8.0f} MB {cpu:5.2f} CPU-s/10s {count:2d} proc")
            else:
                cells.append(f"{value:>20,.0f} rec/s")
        print(f"{key:<26}" + "".join(f"{c:>34}" for c in cells))
    if len(labels) == 2 and RATES:
        before, after = (results[label] for label in labels)
        for key in ("1 busy task(s)", "2 busy task(s)"):
            print(f"{key}: after ÷ before = {after[key] / before[key]:.2f}")
    idle = results[labels[-1]][f"{IDLE_CONNECTORS} idle connectors"]
    print(
        f"target, {IDLE_CONNECTORS} idle connectors: <= 200 MB distinct resident and < 0.1 CPU-s per 10 s; "
        f"measured {idle[0]:.0f} MB ({idle[1]:.0f} MB PSS), {idle[2]:.2f} CPU-s"
    )


if __name__ == "__main__":
    main()
