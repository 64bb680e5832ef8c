#!/usr/bin/env bash
# Set everything up, then run lint, type checks and the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k scheduler).
# Tests inside one process run two at a time; tests that start jobs, shape links or take long
# run one at a time after them, since they share the machine's two cores and time things.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
heavy="distributed or testbed or slow"
run() {  # exit code 5 is "no test selected": a filter may leave one phase empty
  .venv/bin/python -m pytest --timeout=900 --durations=15 "$@" || { rc=$?; [ "$rc" = 5 ] || return "$rc"; }
}
run -n 2 -m "not ($heavy)" "$@"
run -p no:xdist -m "$heavy" "$@"
