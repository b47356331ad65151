#!/usr/bin/env bash
# Installs the system tools Sluice's stack needs when they are missing: a JDK (17+), Maven,
# PostgreSQL's server binaries (the tests run a private cluster), openssl (TLS tests) and
# Prometheus (the metrics tests scrape a worker with it).
# Everything else comes from PyPI (into .venv) and Maven Central (via mvn, cached in ~/.m2).
set -euo pipefail

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# PostgreSQL server binaries for the JDBC (and later CDC) tests; the tests start a private cluster.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
# MariaDB server binaries for the JDBC tests; they start a private server (tests/services/mariadb.py).
{ command -v mariadbd || [[ -x /usr/sbin/mariadbd ]]; } >/dev/null 2>&1 || missing+=(mariadb-server)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
# Prometheus (and promtool) for the metrics tests: they start a private server that scrapes a worker.
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# podman with runc (crun refuses this machine's cgroup mode) and debootstrap: the container image's
# tests make its base images and build and run it (deploy/container_image.py).
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
{ command -v debootstrap || [[ -x /usr/sbin/debootstrap ]]; } >/dev/null 2>&1 || missing+=(debootstrap)
# Headless Chromium and its WebDriver for the web console's browser tests (tests/integration/test_console.py):
# Debian's packages install /usr/bin/chromium and /usr/bin/chromedriver.
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
[[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]] && ! command -v sudo >/dev/null 2>&1; then
    echo "sluice: missing ${missing[*]}; install them (root or sudo needed)" >&2
    exit 1
  fi
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  echo "sluice: installing ${missing[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
