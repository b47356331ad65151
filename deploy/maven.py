"""Jars from Maven Central, fetched once with ``mvn`` into Sluice's cache.

Kafka, S3Proxy and the JsonConverter test vectors all come this way: a pom kept in the repository,
``mvn dependency:copy-dependencies -DincludeScope=runtime`` into a staging directory, a rename into
place and a marker file written last, so an interrupted fetch is never mistaken for a complete one.
Concurrent callers (parallel test sessions, the Makefile) serialise on a lock file. Fetches that
are not a jar classpath (Apicurio Registry's tarball) call :func:`run_mvn` themselves and keep the
same discipline with :func:`exclusive_lock`, :func:`write_atomically` and :data:`COMPLETE_MARKER`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

COMPLETE_MARKER: Final = ".complete"
MVN_TIMEOUT_S: Final = 900.0
TAIL_LINES: Final = 40

_ANSI_ESCAPE_RE: Final = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAVEN_BOILERPLATE_RE: Final = re.compile(
    r"re-run Maven|Re-run Maven|For more information about the errors|\[Help \d+\] http"
)


class MavenFetchError(RuntimeError):
    """Maven is missing, failed, or did not produce the expected jars."""


def cache_dir() -> Path:
    """Root of Sluice's download cache.

    ``$SLUICE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``.
    """
    override = os.environ.get("SLUICE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "sluice"


def libs_dir(name: str, version: str) -> Path:
    """Where the jars of ``name`` ``version`` live once fetched (whether or not they are yet)."""
    return cache_dir() / f"{name}-{version}" / "libs"


def is_cached(name: str, version: str) -> bool:
    """True if a completed fetch of ``name`` ``version`` is in the cache."""
    libs = libs_dir(name, version)
    return (libs.parent / COMPLETE_MARKER).is_file() and libs.is_dir()


def ensure_jars(
    name: str,
    version: str,
    *,
    pom: Path,
    properties: Mapping[str, str],
    artifact: str,
    check: Callable[[list[str]], str | None],
    mvn: str | None = None,
    error: type[Exception] = MavenFetchError,
) -> Path:
    """The directory of ``name`` ``version``'s runtime jars, fetched from ``pom`` on first use.

    ``properties`` become ``-Dkey=value`` for the pom; ``artifact`` names what is fetched in error
    messages; ``check(jar names)`` returns a problem description when the fetched set is wrong.
    Failures raise ``error`` with Maven's output tail.
    """
    libs = libs_dir(name, version)
    if is_cached(name, version):
        return libs
    home = libs.parent
    home.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(home / ".lock"):
        if not is_cached(name, version):  # another process may have finished while we waited
            _fetch_locked(home, version, pom, properties, artifact, check, mvn, error)
    return libs


def _fetch_locked(
    home: Path,
    version: str,
    pom: Path,
    properties: Mapping[str, str],
    artifact: str,
    check: Callable[[list[str]], str | None],
    mvn: str | None,
    error: type[Exception],
) -> None:
    mvn_exe = find_mvn(artifact, mvn, error)
    for leftover in home.glob("libs.partial-*"):  # from fetches that were killed
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix="libs.partial-", dir=home))
    started = time.monotonic()
    try:
        run_mvn(
            [
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
                *(f"-D{key}={value}" for key, value in properties.items()),
            ],
            artifact=artifact,
            cwd=home,
            mvn=mvn_exe,
            error=error,
        )
        jars = sorted(p.name for p in staging.glob("*.jar"))
        problem = check(jars)
        if problem:
            raise error(f"mvn succeeded but {problem} ({len(jars)} jars); check {pom}")
        libs = home / "libs"
        if libs.exists():  # a crash between the rename and the marker left it unmarked
            shutil.rmtree(libs)
        staging.chmod(0o755)  # mkdtemp makes it owner-only; it is an ordinary cache directory
        os.replace(staging, libs)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    elapsed = time.monotonic() - started
    marker = {
        "artifact": artifact,
        "version": version,
        "jars": jars,
        "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(elapsed, 1),
    }
    write_atomically(home / COMPLETE_MARKER, json.dumps(marker, indent=2) + "\n")
    log.info("Fetched %d jars for %s in %.1fs into %s", len(jars), artifact, elapsed, libs)


def find_mvn(artifact: str, mvn: str | None = None, error: type[Exception] = MavenFetchError) -> str:
    """``mvn`` if given, else the ``mvn`` on PATH; raises ``error`` saying how to install Maven."""
    found = mvn or shutil.which("mvn")
    if not found:
        raise error(
            f"Maven ('mvn') is not on PATH. It is needed once, to fetch {artifact} from "
            "Maven Central; install Maven 3.8+ (e.g. `apt-get install maven`) and retry."
        )
    return found


def run_mvn(
    args: Sequence[str],
    *,
    artifact: str,
    cwd: Path,
    mvn: str | None = None,
    error: type[Exception] = MavenFetchError,
) -> None:
    """Run ``mvn args`` in batch mode to fetch ``artifact``; raises ``error`` with Maven's output
    tail if it fails, cannot start, or takes longer than :data:`MVN_TIMEOUT_S`."""
    mvn_exe = find_mvn(artifact, mvn, error)
    # -U: retry artifacts an earlier failed attempt marked missing (Maven caches that for a day).
    cmd = [mvn_exe, "-B", "-q", "-U", "-Dstyle.color=never", *args]
    log.info("Fetching %s from Maven Central: %s", artifact, shlex.join(cmd))
    try:
        # Maven writes its [ERROR] lines to stdout, so merge the streams for the tail.
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=MVN_TIMEOUT_S,
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise error(
            f"mvn did not finish fetching {artifact} within {MVN_TIMEOUT_S:.0f}s"
            f"\n  command: {shlex.join(cmd)}"
            f"\n  mvn output (last lines):\n{indent(maven_tail(as_text(exc.stdout)))}"
        ) from exc
    except OSError as exc:
        raise error(f"could not run {mvn_exe}: {exc}") from exc
    if result.returncode != 0:
        raise error(
            f"mvn failed (exit code {result.returncode}) fetching {artifact} from Maven Central"
            f"\n  command: {shlex.join(cmd)}"
            f"\n  mvn output (last lines):\n{indent(maven_tail(result.stdout))}"
        )


def maven_tail(output: str) -> str:
    """The last lines of Maven's output that say what failed (its help boilerplate dropped)."""
    kept = [
        line
        for line in _ANSI_ESCAPE_RE.sub("", output).splitlines()
        if line.strip() not in ("", "[ERROR]") and not _MAVEN_BOILERPLATE_RE.search(line)
    ]
    return tail_text("\n".join(kept))


def tail_text(text: str, lines: int = TAIL_LINES) -> str:
    text = _ANSI_ESCAPE_RE.sub("", text)
    return "\n".join(text.strip("\n").splitlines()[-lines:]) or "(no output)"


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def as_text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block."""
    with open(path, "ab") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
