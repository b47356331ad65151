"""Regenerate the JsonConverter compatibility vectors with Apache Kafka Connect's own converter.

Fetches ``org.apache.kafka:connect-json`` and its runtime dependencies from Maven Central into
``~/.cache/sluice/connect-json-<version>`` (once; ``$SLUICE_CACHE_DIR`` moves it), runs ``JsonConverterVectors.java`` next to this
file with a single-file ``java`` launch, and writes its output to
``tests/unit/converters/vectors/json_converter.jsonl``::

    python tests/compat/generate_vectors.py            # rewrite the committed vectors
    python tests/compat/generate_vectors.py --check    # exit 1 if they differ from Connect's output

Needs ``mvn`` and a JDK (17 or later) on ``PATH``, or ``--java``/``--mvn`` pointing at them.
``tests/integration/test_json_converter_vectors.py`` imports :func:`generate` from here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from sluice.deploy import maven

CONNECT_VERSION = "4.1.1"  # keep equal to <connect.version> in pom.xml
COMPAT_DIR = Path(__file__).resolve().parent
REPO_ROOT = COMPAT_DIR.parent.parent
VECTORS_PATH = REPO_ROOT / "tests" / "unit" / "converters" / "vectors" / "json_converter.jsonl"
PROGRAM = COMPAT_DIR / "JsonConverterVectors.java"
POM = COMPAT_DIR / "pom.xml"


class ToolMissing(RuntimeError):
    """``java`` or ``mvn`` is not installed; the message says which and how to point at it."""


def find_tool(name: str, explicit: str | None = None) -> str:
    """The path of ``java``/``mvn``: the explicit one, ``$JAVA_HOME/bin/java`` for java, else ``PATH``."""
    if explicit:
        return explicit
    if name == "java" and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"'{name}' was not found on PATH; install it or pass --{name} /path/to/{name}")
    return found


def ensure_jars(version: str = CONNECT_VERSION, mvn: str | None = None) -> Path:
    """connect-json ``version`` and its runtime dependencies, fetched once into Sluice's cache."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"unsupported connect-json version {version!r}: expected x.y.z")

    def check(jars: list[str]) -> str | None:
        return None if f"connect-json-{version}.jar" in jars else f"no connect-json-{version}.jar was fetched"

    return maven.ensure_jars(
        "connect-json",
        version,
        pom=POM,
        properties={"connect.version": version},
        artifact=f"org.apache.kafka:connect-json:{version}",
        check=check,
        mvn=find_tool("mvn", mvn),
        error=RuntimeError,
    )


def generate(version: str = CONNECT_VERSION, java: str | None = None, mvn: str | None = None) -> bytes:
    """Run the Java program against the real converter and return its JSON lines."""
    jars = ensure_jars(version, mvn)
    classpath = str(jars / "*")  # expanded by the java launcher, not the shell
    with tempfile.TemporaryDirectory() as scratch:
        # Single-file launch compiles in memory; the scratch cwd keeps stray files out of the repo.
        command = [find_tool("java", java), "-cp", classpath, str(PROGRAM)]
        result = subprocess.run(command, capture_output=True, cwd=scratch, check=False)
    if result.returncode != 0:
        stderr = result.stderr.decode(errors="replace")
        hint = "\n(a single-file source launch needs a full JDK 17+, not a JRE)" if "jdk.compiler" in stderr else ""
        raise RuntimeError(f"{PROGRAM.name} failed ({result.returncode}):\n{stderr}{hint}")
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    parser.add_argument("--output", type=Path, default=VECTORS_PATH, help="vectors file (default: %(default)s)")
    parser.add_argument("--connect-version", default=CONNECT_VERSION, help="connect-json version (%(default)s)")
    parser.add_argument("--java", help="java executable (default: $JAVA_HOME/bin/java or PATH)")
    parser.add_argument("--mvn", help="mvn executable (default: PATH)")
    args = parser.parse_args(argv)
    try:
        produced = generate(args.connect_version, args.java, args.mvn)
    except (ToolMissing, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    count = produced.count(b"\n")
    if args.check:
        committed = args.output.read_bytes() if args.output.exists() else b""
        if committed != produced:
            print(f"{args.output} differs from Kafka Connect {args.connect_version}'s output", file=sys.stderr)
            return 1
        print(f"{args.output} matches Kafka Connect {args.connect_version} ({count} vectors)")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(produced)
    print(f"wrote {count} vectors to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
