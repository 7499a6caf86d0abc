#!/usr/bin/env bash
# Everything a fresh machine needs: redis-server (apt-get when missing), a venv, the package.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing redis-server with apt-get" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  else
    echo "setup: redis-server is missing and apt-get is not available; install Redis 7" >&2
    exit 1
  fi
fi
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,spark,web,sqs,docs]' 2>&1 | grep -v '^WARNING' || true
.venv/bin/python -c 'import keyqueue' # fails loudly if the install did not work
# keyqueue's bytecode, compiled once: every process the demo, the workers and the tests start
# reads it (where PYTHONDONTWRITEBYTECODE is set, each would compile every module again).
.venv/bin/python -m compileall -q keyqueue tests >/dev/null
