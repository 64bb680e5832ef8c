#!/usr/bin/env bash
# Set everything up, then run AutoByte's main job on the local default: `autobyte demo`, a short
# real training run with TensorFlow and with MXNet on the local testbed (network namespaces with
# shaped links as root, loopback otherwise), tuned live while the link rate drops mid-run.
# Extra arguments go to `autobyte demo` (e.g. scripts/demo.sh --framework tensorflow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/autobyte demo "$@"
