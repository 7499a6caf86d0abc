#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, lint, a strict type check, the docs site's
# strict build, then pytest (the tests start their own redis-servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Debian's headless Chromium and its driver for the dashboard's browser tests
if ! command -v chromedriver >/dev/null 2>&1 || ! { command -v chromium >/dev/null 2>&1; }; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium and chromium-driver with apt-get" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: chromium/chromium-driver missing and apt-get is not available" >&2
    exit 1
  fi
fi
.venv/bin/ruff check keyqueue tests scripts examples docs   # lint: unused imports and variables, undefined names, import order
.venv/bin/ruff format --check --quiet keyqueue tests scripts examples docs   # the formatting ruff format writes
.venv/bin/mypy                     # strict type check of keyqueue/ (settings in pyproject.toml)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"   # the docs site builds (mkdocs.yml)
# pytest in 6 xdist workers (each starts its own redis-server; most tests wait on I/O, and 6
# measured fastest on 2 cores: 4 and 8 were slower); --dist loadgroup keeps the browser tests
# on one worker; a -n given as an argument comes last and wins. Then the Spark tests, alone:
# beside the rest of the suite their JVM and its Python workers starve (Spark gives a Python
# worker 10 s to connect back). Exit 5 (nothing selected, e.g. a path given) is no failure.
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${KQ_TEST_WORKERS:-6}" --dist loadgroup -m "not spark" "$@" || status=$?
[ "$status" = 5 ] && status=0
spark=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n 0 -m spark "$@" || spark=$?
[ "$spark" = 5 ] && spark=0
exit $(( status != 0 ? status : spark ))
