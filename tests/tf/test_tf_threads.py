"""TensorFlow's inter-op threads: with one, every gradient is communicated after the whole
backward pass, so AutoByteStrategy warns; the demo takes its thread counts from TensorFlow's own
variables and names a bad one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow", reason="needs tensorflow==2.21 (pip install 'autobyte[tf]')")

_PROBE = """
import logging, sys
import tensorflow as tf
if sys.argv[1]:
    tf.config.threading.set_inter_op_parallelism_threads(int(sys.argv[1]))
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from autobyte_tf.strategy import _warn_if_one_inter_op_thread
_warn_if_one_inter_op_thread()
"""


@pytest.mark.parametrize("configured, variable, warned",
                         [("1", None, True), ("2", None, False), ("", "1", True),
                          ("", "2", False), ("2", "1", False)])
def test_one_inter_op_thread_is_warned_about(configured: str, variable: str | None,
                                             warned: bool) -> None:
    """Set through TensorFlow's API or, when that is not called, its variable."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_NUM_INTEROP_THREADS", None)
    if variable is not None:
        env["TF_NUM_INTEROP_THREADS"] = variable
    done = subprocess.run([sys.executable, "-c", _PROBE, configured], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    assert ("one inter-op thread" in done.stderr) is warned, done.stderr


def test_the_demo_reads_tensorflows_thread_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from autobyte_tf.demo import _threads

    monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    assert _threads("TF_NUM_INTEROP_THREADS", 2) == 2
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "3")
    assert _threads("TF_NUM_INTEROP_THREADS", 2) == 3
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "0")
    with pytest.raises(SystemExit, match="TF_NUM_INTEROP_THREADS='0'"):
        _threads("TF_NUM_INTEROP_THREADS", 2)
