"""Sluice's container image (``deploy/container/Containerfile``), built with this machine's podman.

No public image registry is reachable from CI here, so the Containerfile's two base images are
made locally instead of pulled: ``debootstrap --variant=minbase`` writes a Debian root file system
from the mirror apt already uses, the docs and apt lists are trimmed off, and ``podman import``
turns it into an image. Two bases are made:

- :data:`RUNTIME_BASE` (``python3``, ``python3-venv``, ``ca-certificates``), standing in for
  ``python:3.11-slim-bookworm``;
- :data:`BUILDER_BASE` (the same plus ``gcc`` and ``libc6-dev``), standing in for
  ``rust:1-slim-bookworm``; it has no cargo, so the Containerfile's builder stage installs Rust with
  rustup from static.rust-lang.org, as it would on any base without cargo.

This machine's outgoing HTTPS passes a TLS-intercepting proxy whose CA is among the host's local
certificates (``/usr/local/share/ca-certificates``). Those certificates are added to both bases'
trust store (``update-ca-certificates``), and ``PIP_CERT`` points pip at it, as a site's own base
images would carry its CA; the Containerfile itself knows nothing of it.

The image is then built with ``podman --runtime runc build --network host`` (crun refuses this
machine's cgroup mode; pip, rustup and cargo reach PyPI, static.rust-lang.org and crates.io through
the host's network) and lowered ulimits (raising them is refused). It is tagged with a digest of its
inputs (the build context, the build arguments and the base images), so an unchanged tree is not
rebuilt; podman's layer cache keeps a rebuild after a change short.

``deploy/compose/compose.yaml`` cannot be run here (its images come from registries), so it is
checked with the Compose Specification's own validator, ``cmd`` of ``github.com/compose-spec/compose-go``
(the loader docker compose uses), built with ``go install`` through the Go module proxy.

This module installs nothing: ``deploy/bootstrap.sh`` installs podman, runc and debootstrap. Cache
layout (``$SLUICE_CACHE_DIR``, default ``~/.cache/sluice``)::

    container/bookworm-python-<digest>.tar  the runtime base's root file system (+ .complete)
    container/bookworm-builder-<digest>.tar the builder base's
    container/build.log                     the last ``podman build``'s output
    container/bin/compose-spec-v2.16.2      the Compose file validator
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sluice.deploy.maven import COMPLETE_MARKER, cache_dir, exclusive_lock
from sluice.deploy.sources import SourceTreeNotFound, source_root

log = logging.getLogger(__name__)

SUITE: Final = "bookworm"
FALLBACK_MIRROR: Final = "http://deb.debian.org/debian"
IMAGE_REPOSITORY: Final = "localhost/sluice"
DEFAULT_EXTRAS: Final = "postgres,avro"
#: podman as it runs here: crun refuses the cgroup mode, and ulimits may only be lowered.
PODMAN_GLOBAL_ARGS: Final = ("--runtime", "runc")
ULIMIT_ARGS: Final = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
COMPOSE_GO_VERSION: Final = "v2.16.2"
BUILD_TIMEOUT_S: Final = 3600.0
DEBOOTSTRAP_TIMEOUT_S: Final = 1200.0
_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Where Debian keeps a machine's own CA certificates (each a ``.crt``), added to the bases' trust store.
LOCAL_CA_DIR: Final = Path("/usr/local/share/ca-certificates")
_CA_BUNDLE: Final = "/etc/ssl/certs/ca-certificates.crt"


class ContainerImageError(RuntimeError):
    """A tool is missing or a step failed; the message says which, with the tool's own words."""


@dataclass(frozen=True)
class BaseImage:
    """A Debian root file system made by debootstrap and imported into podman as :attr:`tag`."""

    name: str
    packages: tuple[str, ...]

    @property
    def cache_name(self) -> str:
        """``name`` plus a digest of what goes in (packages, local CAs): a change makes a new base."""
        digest = hashlib.sha256("\0".join((SUITE, *self.packages)).encode())
        for certificate in _local_cas():
            digest.update(certificate.read_bytes())
        return f"{self.name}-{digest.hexdigest()[:8]}"

    @property
    def tag(self) -> str:
        return f"localhost/sluice-base:{self.cache_name}"


# passwd (useradd) is in every Debian image the Containerfile is meant for; minbase may leave it out.
RUNTIME_BASE: Final = BaseImage("bookworm-python", ("python3", "python3-venv", "passwd", "ca-certificates"))
BUILDER_BASE: Final = BaseImage("bookworm-builder", ("python3", "python3-venv", "passwd", "ca-certificates", "gcc", "libc6-dev"))


def _local_cas() -> list[Path]:
    return sorted(LOCAL_CA_DIR.glob("*.crt")) if LOCAL_CA_DIR.is_dir() else []


def repository_root() -> Path:
    """The checkout the image is built from (the build context; see :func:`~sluice.deploy.sources.source_root`)."""
    try:
        return source_root()
    except SourceTreeNotFound as exc:
        raise ContainerImageError(f"{exc}; the image is built from the sources") from None


def containerfile() -> Path:
    return repository_root() / "deploy" / "container" / "Containerfile"


def ignore_file() -> Path:
    return containerfile().with_name("Containerfile.dockerignore")


def _cache() -> Path:
    return cache_dir() / "container"


def _tool(name: str, package: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if Path(p).is_file()), None)
    if found is None:
        raise ContainerImageError(f"`{name}` is not installed (Debian package {package}; deploy/bootstrap.sh installs it)")
    return found


def podman_command() -> list[str]:
    """``podman`` with the global options this machine needs (runc when it is installed)."""
    podman = _tool("podman", "podman")
    return [podman, *PODMAN_GLOBAL_ARGS] if shutil.which("runc") else [podman]


def _run(
    args: Sequence[str], *, what: str, timeout: float, log_path: Path | None = None, level: int = logging.INFO, **kwargs: object
) -> str:
    """Run ``args``; its stdout, or :class:`ContainerImageError` with the tail of its output (``log_path``: the
    output goes there instead, and the error quotes its end). Its duration is logged at ``level``."""
    started = time.monotonic()
    try:
        if log_path is None:
            done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]
            output, errors = done.stdout, done.stderr
        else:
            with log_path.open("w", encoding="utf-8") as handle:
                done = subprocess.run(list(args), stdout=handle, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]
            output, errors = "", log_path.read_text(encoding="utf-8", errors="replace")
    except subprocess.TimeoutExpired:
        raise ContainerImageError(f"{what} did not finish within {timeout:g}s") from None
    if done.returncode != 0:
        tail = "\n".join(errors.strip().splitlines()[-30:])
        raise ContainerImageError(f"{what} failed (exit {done.returncode}):\n{tail}")
    log.log(level, "%s: %.0f s", what, time.monotonic() - started)
    return str(output)


def image_exists(tag: str) -> bool:
    return subprocess.run([*podman_command(), "image", "exists", tag], capture_output=True).returncode == 0


def image_id(tag: str) -> str:
    return _run([*podman_command(), "image", "inspect", "--format", "{{.Id}}", tag], what=f"inspect {tag}", timeout=60, level=logging.DEBUG).strip()


def image_size(tag: str) -> int:
    """The image's size in bytes, as ``podman images`` reports it (all layers, base included)."""
    return int(_run([*podman_command(), "image", "inspect", "--format", "{{.Size}}", tag], what=f"inspect {tag}", timeout=60,
                    level=logging.DEBUG))


# -- base images -------------------------------------------------------------------------------------------


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses for :data:`SUITE` (deb822 ``.sources`` or one-line ``.list`` entries)."""
    for path in sorted(sources.glob("sources.list.d/*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")):
            fields = dict(
                (key.strip().lower(), value.strip())
                for key, sep, value in (line.partition(":") for line in stanza.splitlines() if not line.startswith("#"))
                if sep
            )
            if "deb" in fields.get("types", "").split() and SUITE in fields.get("suites", "").split():
                return fields["uris"].split()[0]
    lists = [sources / "sources.list", *sorted(sources.glob("sources.list.d/*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            words = [w for w in re.sub(r"\[[^]]*\]", "", line).split() if w]
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                return words[1]
    return FALLBACK_MIRROR


def _trim_rootfs(root: Path) -> None:
    """Drop what a slim image leaves out: apt's downloaded lists and packages, docs (but copyrights), man pages."""
    for pattern in ("var/lib/apt/lists/*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin",
                    "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*", "var/log/*.log"):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.name not in ("lock", "partial"):
                path.unlink()
    for doc in root.glob("usr/share/doc/*"):
        if doc.is_dir() and not doc.is_symlink():
            for item in doc.iterdir():
                if item.name != "copyright":
                    shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()


def _add_local_cas(rootfs: Path) -> None:
    """Trust the host's own CA certificates in ``rootfs`` too (the egress proxy's among them)."""
    certificates = _local_cas()
    if not certificates:
        return
    target = rootfs / LOCAL_CA_DIR.relative_to("/")
    target.mkdir(parents=True, exist_ok=True)
    for certificate in certificates:
        shutil.copyfile(certificate, target / certificate.name)
    _run(["chroot", str(rootfs), "update-ca-certificates"], what="update-ca-certificates in the base", timeout=120)


def _make_rootfs_tar(base: BaseImage, target: Path) -> None:
    """debootstrap ``base`` into a scratch directory and pack it into ``target`` (renamed into place)."""
    debootstrap = _tool("debootstrap", "debootstrap")
    mirror = debian_mirror()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{base.cache_name}-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _run(
            [debootstrap, "--variant=minbase", f"--include={','.join(base.packages)}", SUITE, str(rootfs), mirror],
            what=f"debootstrap {base.cache_name} from {mirror}",
            timeout=DEBOOTSTRAP_TIMEOUT_S,
            log_path=Path(scratch) / "debootstrap.log",
        )
        _add_local_cas(rootfs)
        _trim_rootfs(rootfs)
        partial = Path(scratch) / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."],
             what=f"pack {base.cache_name}", timeout=600)
        os.replace(partial, target)
        target.with_name(target.name + COMPLETE_MARKER).write_text(f"{SUITE} from {mirror}: {', '.join(base.packages)}\n")


def ensure_base(base: BaseImage) -> str:
    """``base``'s tag, made (debootstrap, then ``podman import``) unless podman or the cache has it."""
    if image_exists(base.tag):
        return base.tag
    _cache().mkdir(parents=True, exist_ok=True)
    with exclusive_lock(_cache() / ".lock"):
        if image_exists(base.tag):
            return base.tag
        tar = _cache() / f"{base.cache_name}.tar"
        if not tar.with_name(tar.name + COMPLETE_MARKER).is_file():
            _make_rootfs_tar(base, tar)
        _run(
            [*podman_command(), "import", "--change", f"ENV PATH={_PATH}", "--change", f"ENV PIP_CERT={_CA_BUNDLE}",
             "--change", 'CMD ["/bin/bash"]',
             "--message", f"debootstrap {SUITE} minbase + {', '.join(base.packages)}", str(tar), base.tag],
            what=f"podman import {base.tag}",
            timeout=600,
        )
    return base.tag


# -- the Compose file's validator ----------------------------------------------------------------------------


def compose_validator() -> Path:
    """The Compose Specification validator (``compose-spec [-format json] FILE``), built unless cached."""
    target = _cache() / "bin" / f"compose-spec-{COMPOSE_GO_VERSION}"
    if os.access(target, os.X_OK):
        return target
    go = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).is_file()), None)
    if go is None:
        raise ContainerImageError("`go` is not installed: the Compose validator is built from the Go module proxy (Go 1.24+)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        _run([go, "install", f"github.com/compose-spec/compose-go/v2/cmd@{COMPOSE_GO_VERSION}"],
             what=f"go install compose-go/v2/cmd@{COMPOSE_GO_VERSION}", timeout=900,
             env={**os.environ, "GOBIN": scratch, "CGO_ENABLED": "0"})
        os.replace(Path(scratch) / "cmd", target)
    return target


# -- the image ----------------------------------------------------------------------------------------------


def _ignore_patterns() -> list[str]:
    lines = ignore_file().read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _ignored(relative: str, patterns: Sequence[str]) -> bool:
    # The two shapes the ignore file uses: "**/name" (anywhere) and a path from the context's root.
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in relative.split("/")):
                return True
        elif relative == pattern or relative.startswith(pattern + "/") or fnmatch.fnmatch(relative.split("/")[0], pattern):
            return True
    return False


def _context_files(root: Path) -> Iterator[Path]:
    patterns = _ignore_patterns()
    for directory, dirs, files in os.walk(root):
        rel_dir = Path(directory).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        # A link to a directory (the sluice/ package's links to the subpackages) counts by its target's name.
        linked = [d for d in dirs if Path(directory, d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in linked and not _ignored(prefix + d, patterns))
        for name in sorted([*files, *linked]):
            if not _ignored(prefix + name, patterns):
                yield Path(directory, name)


def inputs_digest(build_args: dict[str, str]) -> str:
    """A digest of everything the build reads: the context's files, the build arguments, the bases' ids."""
    root = repository_root()
    digest = hashlib.sha256()
    for key in sorted(build_args):
        digest.update(f"arg {key}={build_args[key]}\0".encode())
        if key in ("BASE", "BUILDER"):
            digest.update(f"id {image_id(build_args[key])}\0".encode())
    for path in _context_files(root):
        digest.update(f"file {path.relative_to(root).as_posix()}\0".encode())
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class BuiltImage:
    """The image :func:`build` made or found, and what it was built from."""

    tag: str
    extras: str
    rebuilt: bool
    build_seconds: float

    @property
    def size_bytes(self) -> int:
        return image_size(self.tag)


def build(extras: str = DEFAULT_EXTRAS, *, force: bool = False) -> BuiltImage:
    """The image with ``extras``, built from the working tree unless one from the same inputs exists."""
    build_args = {"BASE": ensure_base(RUNTIME_BASE), "BUILDER": ensure_base(BUILDER_BASE), "EXTRAS": extras}
    flavour = _flavour(extras)
    tag = f"{IMAGE_REPOSITORY}:{flavour}-{inputs_digest(build_args)[:16]}"
    if not force and image_exists(tag):
        log.info("%s is up to date", tag)
        return BuiltImage(tag, extras, rebuilt=False, build_seconds=0.0)
    _cache().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with exclusive_lock(_cache() / ".build.lock"):
        _run(
            [*podman_command(), "build", "--network", "host", "--format", "docker", *ULIMIT_ARGS,
             "--ignorefile", str(ignore_file()),
             *(arg for key, value in build_args.items() for arg in ("--build-arg", f"{key}={value}")),
             "--file", str(containerfile()), "--tag", tag, "--tag", f"{IMAGE_REPOSITORY}:{flavour}", str(repository_root())],
            what="podman build",
            timeout=BUILD_TIMEOUT_S,
            log_path=_cache() / "build.log",
        )
    _forget_older_builds(flavour, keep=tag)
    return BuiltImage(tag, extras, rebuilt=True, build_seconds=time.monotonic() - started)


def _flavour(extras: str) -> str:
    """The tag's name for a set of extras: ``jdbc,s3`` -> ``jdbc-s3``; none -> ``core``."""
    return "-".join(extra.strip() for extra in extras.split(",") if extra.strip()) or "core"


def _forget_older_builds(flavour: str, keep: str) -> None:
    """Untag earlier builds of the same extras, so disk use does not grow with every change (images in use stay)."""
    listed = subprocess.run(
        [*podman_command(), "images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPOSITORY],
        capture_output=True, text=True,
    ).stdout.split()
    earlier = re.compile(rf"{re.escape(IMAGE_REPOSITORY)}:{re.escape(flavour)}-[0-9a-f]{{16}}")
    stale = [tag for tag in listed if earlier.fullmatch(tag) and tag != keep]
    if stale:
        subprocess.run([*podman_command(), "rmi", *stale], capture_output=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sluice.deploy.container_image fetch|build``: make the base images, or build the image too."""
    parser = argparse.ArgumentParser(prog="python -m sluice.deploy.container_image", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "build"],
                        help="fetch: make the base images and the Compose validator if missing; "
                             "build: build the image from this tree (making the base images first)")
    parser.add_argument("--extras", default=DEFAULT_EXTRAS, help="extras of the sluice wheel (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="build even if an image from the same inputs exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.command == "fetch":
            print(f"runtime_base={ensure_base(RUNTIME_BASE)}\nbuilder_base={ensure_base(BUILDER_BASE)}\n"
                  f"compose_validator={compose_validator()}")
            return 0
        image = build(args.extras, force=args.force)
        print(f"image={image.tag}\nextras={image.extras}\nsize_mb={image.size_bytes / 1e6:.0f}\n"
              f"rebuilt={image.rebuilt}\nbuild_seconds={image.build_seconds:.0f}")
    except ContainerImageError as exc:
        print(f"container_image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
