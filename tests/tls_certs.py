"""Throwaway certificates made with the ``openssl`` command, for tests of TLS and mutual TLS."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _signed(
    directory: Path, name: str, serial: int, subject: str, extensions: str, ca: Path, ca_key: Path
) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}.{suffix}" for suffix in ("crt", "key", "csr", "ext"))
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-set_serial", str(serial),
        "-days", "1", "-extfile", str(ext), "-out", str(cert),
    )
    return cert, key


def make_tls_files(directory: Path, client_subject: str = "/O=Example/CN=alice") -> TlsFiles:
    """Certificates under ``directory``; the client's subject is ``client_subject`` (openssl's ``/K=V`` form)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=Sluice test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(ca_key), "-out", str(ca),
    )
    server_cert, server_key = _signed(
        directory, "server", 2, "/CN=127.0.0.1",
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", ca, ca_key,
    )
    client_cert, client_key = _signed(
        directory, "client", 3, client_subject, "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n", ca, ca_key
    )
    return TlsFiles(ca, server_cert, server_key, client_cert, client_key)
