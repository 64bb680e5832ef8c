"""Quiet output: the frameworks' start-up noise filtered from AutoByte's own processes, nothing
else lost; verbose keeps everything."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.output import VERBOSE_ENV, child_env, is_noise, setup_logging

ROOT = Path(__file__).resolve().parents[2]
NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795514803.933771     707 port.cc:153] oneDNN custom operations are on.\n",
    "I0000 00:00:1795514874.496743    3272 cpu_feature_guard.cc:227] This TensorFlow binary\n",
    "To enable the following instructions: AVX2 AVX512F, in other operations, rebuild.\n",
    "E0000 00:00:1795514807.993171     707 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n",
]
KEPT = [
    "E0000 00:00:1795514807.993171     707 collective_ops.cc:12] Collective timed out\n",
    "/x/mxnet/numpy/utils.py:37: FutureWarning: np.bool\n",
    "Traceback (most recent call last):\n",
    "ValueError: a real error\n",
    "worker said something\n",
]


def test_noise_is_recognised_and_real_errors_are_not() -> None:
    assert all(is_noise(line) for line in NOISE if not line.startswith("To enable"))
    assert not any(is_noise(line) for line in KEPT)


def _run_filtered(lines: list[str], env: dict[str, str]) -> str:
    code = ("import os, sys\n"
            "from common.output import filtered_stderr\n"
            f"lines = {lines!r}\n"
            "with filtered_stderr():\n"
            "    for line in lines:\n"
            "        os.write(2, line.encode())\n"
            "    print('python stderr', file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=60, check=True)
    return result.stderr


def test_filtered_stderr_drops_the_noise_keeps_the_rest_in_order() -> None:
    err = _run_filtered([*NOISE, *KEPT], {VERBOSE_ENV: ""})
    assert err == "".join(KEPT) + "python stderr\n"


def test_verbose_keeps_everything() -> None:
    err = _run_filtered([*NOISE, *KEPT], {VERBOSE_ENV: "1"})
    assert err == "".join([*NOISE, *KEPT]) + "python stderr\n"


def test_what_is_written_before_an_exception_is_not_lost() -> None:
    code = ("import os\nfrom common.output import filtered_stderr\n"
            "with filtered_stderr():\n    os.write(2, b'before\\n')\n    raise SystemExit(3)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env={**os.environ, VERBOSE_ENV: ""})
    assert result.returncode == 3 and result.stderr == "before\n"


def test_importing_tensorflow_through_autobyte_prints_nothing() -> None:
    pytest.importorskip("tensorflow", reason="needs tensorflow (pip install 'autobyte[tf]')")
    code = ("from common.output import import_tensorflow\n"
            "tf = import_tensorflow()\nprint(int(tf.constant(2) + 1))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env={**os.environ, VERBOSE_ENV: ""})
    assert result.stdout == "3\n" and result.stderr == "", result.stderr


def test_logging_is_autobytes_info_and_others_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    for name in ("common", "autobyte_tf", "autobyte_mx", "__main__", "tensorflow"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)  # restored after the test
        monkeypatch.setattr(logger, "propagate", logger.propagate)
    setup_logging()
    assert logging.getLogger("common.control").getEffectiveLevel() == logging.INFO
    assert logging.getLogger("tensorflow").getEffectiveLevel() == logging.ERROR
    assert child_env() == {"TF_CPP_MIN_LOG_LEVEL": "2", "MXNET_STORAGE_FALLBACK_LOG_VERBOSE": "0"}
    assert child_env(True)[VERBOSE_ENV] == "1"


def test_meta_eval_prints_its_result_and_nothing_else(tmp_path: Path) -> None:
    """Run from another directory, as a user would: two lines of result, no framework logs
    (it printed 8 C++ lines, one of them a cuInit 'error', before its result)."""
    pytest.importorskip("keras", reason="needs keras 3 (pip install 'autobyte[tf]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "AUTOBYTE_"))}
    result = subprocess.run([sys.executable, "-m", "common.cli", "meta", "eval"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**env, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2 and "MAPE" in result.stdout
    assert result.stderr == "", result.stderr
