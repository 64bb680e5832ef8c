#!/usr/bin/env bash
# Set everything up, then run lint, type checks and the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k scheduler).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest --timeout=900 --durations=25 "$@"
