#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, then pytest (tests start their own redis-servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
