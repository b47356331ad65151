"""Facts about this machine's /etc/passwd, for tests that make sure it is never read back."""

from __future__ import annotations

from pathlib import Path

PASSWD = Path("/etc/passwd")


def passwd_lines() -> list[str]:
    """The non-empty lines of /etc/passwd."""
    return [line for line in PASSWD.read_text().splitlines() if line.strip()]


def passwd_root() -> str:
    """What ``${file:/etc/passwd:root}`` would resolve to: the root line after ``root:``.

    Every Linux machine these tests run on has that line; its absence is a broken test host, so
    the tests fail rather than skip.
    """
    root = next((line for line in passwd_lines() if line.startswith("root:")), None)
    assert root is not None, f"{PASSWD} has no root line: the confinement tests need it as the secret to guard"
    return root.split(":", 1)[1]
