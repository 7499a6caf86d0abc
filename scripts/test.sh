#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, a strict type check, then pytest (the
# tests start their own redis-servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check keyqueue tests scripts   # lint: unused imports and variables, undefined names
.venv/bin/mypy                     # strict type check of keyqueue/ (settings in pyproject.toml)
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
