#!/usr/bin/env bash
# Set everything up, then run AutoByte's main job on the local default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/autobyte simulate --model resnet50 --workers 8 --arch ps --bandwidth 10gbit --grid "$@"
