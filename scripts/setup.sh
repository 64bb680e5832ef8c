#!/usr/bin/env bash
# Set up everything AutoByte needs on a fresh machine: a virtualenv in .venv with the package
# (editable) and all extras, plus the system tools the testbed uses when running as root.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  command -v ip >/dev/null || need+=(iproute2)
  command -v tc >/dev/null || need+=(iproute2)
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${need[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.autobyte-installed
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing autobyte[all,dev] into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[all,dev]'
  touch "$stamp"
fi
.venv/bin/python -c "import common, autobyte_tf, autobyte_mx" && echo "setup: ok ($(.venv/bin/python --version))"
