"""What the database launchers share: the unprivileged user a server runs as, and its child set-up.

PostgreSQL and MariaDB both refuse to run as root. When the tests run as root (as on CI
machines), the server runs as the user its Debian package created, in a directory that user
can reach, and dies with the process that started it.
"""

from __future__ import annotations

import os
import pwd
import signal
from collections.abc import Callable
from pathlib import Path

from sluice.worker.runtime import parent_death_signal

LOG_TAIL_LINES = 40


def service_user(name: str, server: str, package: str, error: type[Exception]) -> pwd.struct_passwd | None:
    """The user to run ``server`` as: ``name`` when we are root, else ourselves (``None``)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise error(
            f"{server} refuses to run as root and there is no '{name}' user to run it as; "
            f"install the {package} package (it creates the user) or run as an unprivileged user"
        ) from None


def check_searchable(directory: Path, user: pwd.struct_passwd, server: str, error: type[Exception]) -> None:
    """Raise ``error`` unless ``user`` can reach ``directory`` through every parent."""
    for parent in [directory, *directory.parents]:
        st = parent.stat()
        if st.st_uid != user.pw_uid and not st.st_mode & 0o001:
            raise error(
                f"{parent} is not searchable by the '{user.pw_name}' user that runs {server}; "
                "use a base directory under /tmp (the default)"
            )


def server_env(drop_prefixes: tuple[str, ...]) -> dict[str, str]:
    """Our environment without the client variables (``PG*``, ``MYSQL*``) that would steer the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes)}
    env["LC_ALL"] = "C"
    return env


def child_setup(
    user: pwd.struct_passwd | None, die_with_parent: bool, death_signal: signal.Signals, *, set_home: bool = True
) -> Callable[[], None] | None:
    """A ``preexec_fn`` that drops to ``user`` (with ``HOME`` set to theirs unless ``set_home`` is
    false) and has the kernel send ``death_signal`` when we die."""
    if user is None and not die_with_parent:
        return None
    arm = parent_death_signal() if die_with_parent else None
    parent = os.getpid()

    def setup() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            if set_home:
                os.environ["HOME"] = user.pw_dir
        # After setuid: changing credentials clears the parent-death signal.
        if arm is not None:
            arm(death_signal, parent)

    return setup


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"
