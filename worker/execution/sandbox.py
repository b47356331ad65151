"""The task host sandbox: each task host process confines itself with Linux Landlock before it runs
any task (``task.host.sandbox=landlock``, the default).

Why: every check of a connector config (allowed paths, parsed URLs, client key policy, discovered
plugins) is a rule someone wrote about what a config may *say*. A connector's code — a plugin the
operator installed, or a driver it calls — can still do whatever the worker's user can. Landlock
lets an unprivileged process give up file system access for good, so a task host reads only what
it needs to run Python and the connectors, and writes only where the operator lets connectors
write. A malicious plugin that reads ``/etc/shadow`` or drops a module into ``plugin.path`` gets
``PermissionError`` (EACCES) from the kernel, whatever the checks above it missed.

What a host may do once confined (see :func:`task_host_grants`):

- read and execute: the Python installation (``sys.prefix``, ``sys.base_prefix``, every
  ``sys.path`` entry, this package), ``plugin.path``, the system's libraries and programs
  (``/usr``, ``/lib*``, ``/bin``, ``/sbin``), the few files of ``/etc`` a client needs (TLS roots,
  name resolution, time zones, the user database that libpq consults for the default user name),
  its own ``/proc/self``, the CPU and cgroup figures libraries size their thread pools from, and
  the files the worker's own settings name for its clients (``producer.ssl.ca.location`` …) and
  config providers (``config.providers.*.param.allowed.paths``, read when a task's placeholders
  are resolved in the host);
- read and write: ``connector.allowed.paths`` (what the worker lets connectors use), a private
  temporary directory (``TMPDIR``), and ``/dev/null``; read ``/dev/urandom``, ``/dev/random`` and
  ``/dev/zero``;
- nothing else: not the worker's configuration, offsets or state, not ``/etc/shadow``, not
  ``/root``; no writes to the installation or ``plugin.path``.

With ``connector.allowed.paths=*`` ("anywhere"), the read-write grant is every directory of the file
system except the system's trees (``/etc``, ``/usr``, ``/var``, ``/proc`` …) and the places
:func:`~sluice.worker.config.local_paths.protected_places` lists (``plugin.path``, the installation, the
Python path, the worker's config file, offsets file and ``state.dir``), plus ``<state.dir>/data``:
Landlock only allows, so "anywhere but these" is the entries around them (:func:`writable_around`).
A new file directly inside a directory that holds a protected place (``/tmp`` when the worker's
config lives in ``/tmp/…``) cannot be created then; its subdirectories are writable.

Landlock ABI versions add rights; a ruleset handles exactly the rights the running kernel knows
(:func:`handled_fs_rights`), and a right the kernel does not know is simply not restricted (ABI 1
cannot restrict ``rename`` across directories, ABI 2 ``truncate``, ABI 4 ``ioctl`` on devices).
From ABI 6 the host also may not signal processes outside its sandbox (the worker) nor connect to
abstract Unix sockets outside it. Network access is not restricted: connectors reach their
systems, and restricting those is the network's job (SECURITY.md).

Landlock restricts the calling thread and the threads it creates afterwards, never threads that
already run, so :func:`restrict` refuses to run in a process with more than one thread: a host
calls it first thing, before its control loop starts any thread. Where Landlock is unavailable
(not Linux, a kernel before 5.13 or without Landlock, a seccomp filter or container runtime that
denies the calls), :func:`probe` says why; the worker logs it once and shows it in ``GET /health``.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice.worker.config.local_paths import PathGrant

log = logging.getLogger(__name__)

#: The worker key that turns the sandbox off (``none``) for operators who must.
SANDBOX_KEY = "task.host.sandbox"

# Syscall numbers: the same on every Linux architecture but alpha (the unified table since 5.13).
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# File system rights (include/uapi/linux/landlock.h), with the ABI that introduced each.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

_ABI1_FS = (1 << 13) - 1
#: The file system rights each ABI version knows; later versions know the rights of earlier ones.
_FS_RIGHTS_SINCE = ((1, _ABI1_FS), (2, FS_REFER), (3, FS_TRUNCATE), (5, FS_IOCTL_DEV))
#: The rights that apply to a file (the others only to a directory and what is beneath it).
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

# ABI 6 scopes: no signals to, nor abstract Unix socket connections with, processes outside.
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
#: Everything but making device nodes (a host running as root could otherwise create one).
READ_WRITE = ((1 << 16) - 1) & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)
DEVICE_READ = FS_READ_FILE | FS_IOCTL_DEV
DEVICE_READ_WRITE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV

#: What every host reads of the system: libraries, programs (ctypes' find_library runs ldconfig),
#: TLS roots, name resolution, time zones, and the user database (libpq's default user name).
SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/mime.types",
    "/etc/passwd",
    "/etc/group",
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
)
DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
DEVICES_READ_WRITE = ("/dev/null",)
#: Never writable, even when connectors may use "anywhere": the system's own trees.
SYSTEM_TREES = (
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/etc",
    "/boot",
    "/root",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/var",
    "/snap",
)


class SandboxError(OSError):
    """Landlock is there but the ruleset could not be built or applied: the host must not run tasks."""


@dataclass(frozen=True)
class SandboxStatus:
    """Whether task hosts run confined, as the worker reports it (log and ``GET /health``)."""

    abi: int  # 0: tasks are not confined
    reason: str = ""  # why not, when abi is 0

    @property
    def enforced(self) -> bool:
        return self.abi > 0

    def describe(self) -> str:
        """``landlock ABI 7``, ``off: …`` or ``unavailable: …`` (the ``/health`` detail)."""
        return f"landlock ABI {self.abi}" if self.abi else self.reason


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers this process; raises :class:`OSError` with the
    reason when there is none."""
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, f"Landlock is a Linux feature; this is {sys.platform}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 0:
        code = ctypes.get_errno()
        raise OSError(code, _why_unavailable(code))
    return int(abi)


def _why_unavailable(code: int) -> str:
    if code == errno.ENOSYS:
        return f"the kernel ({os.uname().release}) has no Landlock (Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK)"
    if code == errno.EOPNOTSUPP:
        return "Landlock is disabled at boot (add landlock to the kernel's lsm= parameter)"
    if code in (errno.EPERM, errno.EACCES):
        return "a seccomp filter or the container runtime denies the Landlock system calls"
    return f"landlock_create_ruleset failed: {os.strerror(code)}"


def probe(mode: str, executor: str) -> SandboxStatus:
    """What the worker reports for ``task.host.sandbox=mode`` with ``task.executor=executor``."""
    if executor != "process":
        return SandboxStatus(0, "off: tasks run in the worker process (task.executor=thread)")
    if mode == "none":
        return SandboxStatus(0, f"off: {SANDBOX_KEY}=none")
    try:
        return SandboxStatus(landlock_abi())
    except OSError as exc:
        return SandboxStatus(0, f"unavailable: {exc.strerror}")


def handled_fs_rights(abi: int) -> int:
    """The file system rights a ruleset of ``abi`` handles: all the kernel knows, so nothing it
    can restrict is left unrestricted, and none it does not know (the call would fail)."""
    rights = 0
    for since, added in _FS_RIGHTS_SINCE:
        if abi >= since:
            rights |= added
    return rights


@dataclass(frozen=True)
class Grants:
    """What a confined host may reach: each path with the rights granted on it (and beneath it)."""

    rules: tuple[tuple[str, int], ...]

    def paths(self, rights: int) -> list[str]:
        """The paths granted every right in ``rights`` (for tests and the log)."""
        return [path for path, granted in self.rules if granted & rights == rights]


def writable_around(excluded: Iterable[Path], top: Path = Path("/")) -> list[Path]:
    """The directories and files that together hold everything under ``top`` except ``excluded``
    (and what is beneath each): Landlock grants only, so "anywhere but" is the siblings of each
    excluded path and of its ancestors. Symbolic links are skipped (their targets are reached
    where they are), as are entries that cannot be listed.

    Runs in every task host's start, over directories such as ``/tmp`` that may hold thousands of
    entries: one set lookup per entry (it only descends into ancestors of excluded paths, so an
    entry it meets is never beneath one), not a walk of each entry's parents per excluded path."""
    skipped = {os.path.realpath(p) for p in excluded}
    ancestors = {str(parent) for e in skipped for parent in Path(e).parents}
    out: list[Path] = []

    def visit(directory: str) -> None:
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.path)
        except OSError:
            return
        for entry in entries:
            try:
                if entry.is_symlink() or entry.path in skipped:
                    continue
                if entry.path in ancestors:
                    visit(entry.path)
                elif entry.is_dir() or entry.is_file():
                    out.append(Path(entry.path))
            except OSError:
                continue

    root = os.path.realpath(top)
    if root not in skipped and not any(str(parent) in skipped for parent in Path(root).parents):
        visit(root)
    return out


def python_paths() -> list[str]:
    """The installation and everything Python imports from (this package included)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(p or os.getcwd() for p in sys.path)
    paths.add(str(Path(__file__).resolve().parents[1]))
    return sorted(paths)


def task_host_grants(
    grant: PathGrant,
    *,
    plugin_paths: Sequence[str],
    temp_dir: str,
    data_dir: Path | None,
    worker_settings: Mapping[str, object],
) -> Grants:
    """The rules of a task host's ruleset.

    ``grant`` is the worker's ``connector.allowed.paths`` (:class:`PathGrant`): its roots are read
    and written; "anywhere" (``*``) is every directory around the system's trees and the grant's
    protected places, plus ``data_dir`` (``<state.dir>/data``), which lies inside the protected
    ``state.dir``. ``plugin_paths`` are read only; ``temp_dir`` is the host's own; the worker's
    raw settings name the client TLS files and config provider directories a host reads.
    """
    read = [*SYSTEM_READ, *python_paths(), *plugin_paths, *_worker_files(worker_settings)]
    rules: list[tuple[str, int]] = [(p, READ) for p in read]
    rules += [(p, DEVICE_READ) for p in DEVICES_READ] + [(p, DEVICE_READ_WRITE) for p in DEVICES_READ_WRITE]
    if grant.anywhere:
        excluded = [Path(p) for p in (*SYSTEM_TREES, *python_paths(), *plugin_paths)] + [
            place.path for place in grant.protected
        ]
        writable = [str(p) for p in writable_around(excluded)] + ([str(data_dir)] if data_dir is not None else [])
    else:
        writable = [str(p) for p in grant.roots]
    rules += [(p, READ_WRITE) for p in (*writable, temp_dir)]
    return Grants(tuple(rules))


def _worker_files(settings: Mapping[str, object]) -> list[str]:
    """Files the worker's own settings make a host open: its clients' TLS and Kerberos files
    (``producer.ssl.ca.location`` …) and the directories its config providers may read."""
    files: list[str] = []
    for key, value in settings.items():
        if not isinstance(value, str):
            continue
        if key.startswith(("producer.", "consumer.", "admin.")) and key.endswith((".location", ".keytab")):
            files.append(value)
        elif key.startswith("config.providers.") and key.endswith(".param.allowed.paths"):
            files += [p.strip() for p in value.split(",") if p.strip()]
    return files


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict(grants: Grants) -> int:
    """Confine this process to ``grants`` for good; returns the Landlock ABI used.

    Call it while the process has a single thread. Paths that do not exist are skipped. Raises
    :class:`OSError` when Landlock is unavailable (the caller decides whether to go on unconfined)
    and :class:`SandboxError` when it is available but the ruleset cannot be applied.
    """
    abi = landlock_abi()
    threads = _thread_count()
    if threads != 1:
        raise SandboxError(
            errno.EBUSY, f"a process with {threads} threads cannot be confined: Landlock would miss all but this one"
        )
    handled = handled_fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8  # handled_access_fs only; handled_access_net (ABI 4) is left unrestricted
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    ruleset = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise _error("landlock_create_ruleset")
    try:
        for path, rights in grants.rules:
            _add_rule(libc, int(ruleset), path, rights & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _error("prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _error("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this machine (or not reachable): nothing to grant
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS  # the kernel refuses directory rights on a file
        if not rights:
            return
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if (
            libc.syscall(
                ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise _error(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _error(call: str) -> SandboxError:
    code = ctypes.get_errno()
    return SandboxError(code, f"{call} failed: {os.strerror(code)}")


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1  # no /proc: nothing tells, and a host calls this before it starts any thread
