#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, lint, a strict type check, the docs site's
# strict build, then pytest (the tests start their own redis-servers).
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's headless Chromium and its driver for the dashboard's browser tests, and valgrind
# for the instruction-count benchmark's smoke run: on a machine that lacks them, apt-get runs
# in the background while setup.sh makes the venv (redis-server, when missing too, with
# them: setup.sh then finds it), and the tests wait for it.
apt_pid="" spark_pid="" lint_pid=""
apt_log=$(mktemp)
# On the way out (a failure, Ctrl-C): stop the Spark tests and the lint, never apt-get (a
# package half installed is worse), but say it still runs and where its log is.
cleanup() {
  for pid in $spark_pid $lint_pid; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$apt_pid" ] && kill -0 "$apt_pid" 2>/dev/null; then
    echo "setup: apt-get still runs in the background (pid $apt_pid, log $apt_log)" >&2
  else
    rm -f "$apt_log"
  fi
}
trap cleanup EXIT
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v callgrind_control >/dev/null 2>&1 || missing+=(valgrind)
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: ${missing[*]} missing and apt-get is not available" >&2
    exit 1
  fi
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  echo "setup: installing ${missing[*]} with apt-get (in the background)" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  (
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  ) >"$apt_log" 2>&1 &
  apt_pid=$!
  if ! command -v redis-server >/dev/null 2>&1; then  # (setup.sh would install it again)
    wait "$apt_pid" || { cat "$apt_log"; apt_pid=""; exit 1; }
    apt_pid=""
  fi
fi
bash scripts/setup.sh
# The Spark tests start first, in the background, at normal priority: one process, one JVM.
# The rest run beside them in 6 xdist workers under `nice`, so the JVM and its Python workers
# are never starved (Spark gives a Python worker it starts 10 s to connect back) while the
# suite takes whatever CPU they leave (most tests wait on Redis, processes and sockets; 6
# measured fastest on 2 cores). --dist loadgroup keeps the browser tests on one worker; a -n
# given as an argument comes last and wins. Exit 5 (nothing selected, e.g. a path given) is
# no failure. The 15 slowest tests are listed at the end: where a slow host's time went.
# Their JVMs compile with the quick compiler only and collect on one thread: short jobs,
# about a quarter less CPU (94 s against 127 for the Spark tests alone).
spark_log=$(mktemp)
JAVA_TOOL_OPTIONS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC ${JAVA_TOOL_OPTIONS:-}" \
  .venv/bin/python -m pytest -q -p no:cacheprovider -n 0 -m spark "$@" >"$spark_log" 2>&1 &
spark_pid=$!
# Lint, types and the docs build run beside the tests too (their output comes at the end).
lint_log=$(mktemp)
(
  set -e
  .venv/bin/ruff check keyqueue tests scripts examples docs   # lint: unused imports and variables, undefined names, import order
  .venv/bin/ruff format --check --quiet keyqueue tests scripts examples docs   # the formatting ruff format writes
  .venv/bin/mypy                     # strict type check of keyqueue/ (settings in pyproject.toml)
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"   # the docs site builds (mkdocs.yml)
) >"$lint_log" 2>&1 &
lint_pid=$!
if [ -n "$apt_pid" ]; then
  wait "$apt_pid" || { cat "$apt_log"; apt_pid=""; exit 1; }
  apt_pid=""
fi
status=0
nice -n 15 .venv/bin/python -m pytest -q -p no:cacheprovider -n "${KQ_TEST_WORKERS:-6}" --dist loadgroup --durations=15 -m "not spark" "$@" || status=$?
[ "$status" = 5 ] && status=0
spark=0
wait "$spark_pid" || spark=$?
lint=0
wait "$lint_pid" || lint=$?
trap - EXIT
echo "-- the Spark tests (run beside the rest):"
cat "$spark_log"
echo "-- ruff, mypy and the docs build (run beside the tests):"
cat "$lint_log"
[ "$lint" = 0 ] && echo "ok"
rm -f "$spark_log" "$lint_log" "$apt_log"
[ "$spark" = 5 ] && spark=0
exit $(( status != 0 ? status : (spark != 0 ? spark : lint) ))
