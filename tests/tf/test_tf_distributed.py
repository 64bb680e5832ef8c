"""AutoByteStrategy across real processes on TF collectives, against plain MWMS.

Each job runs ``tf_worker.py`` under ``common.launch`` (TF_CONFIG set by the launcher; 2 and 3
workers on the shaped testbed, 3 on one loopback address too):
Keras fit under four configurations (one switched mid-run, one to native and back), evaluate,
predict, a custom loop with ``strategy.run``, and jit_compile=True refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow", reason="needs tensorflow==2.21 (pip install 'autobyte[tf]')")

from common.launch import launch
from common.testbed import Testbed

pytestmark = [pytest.mark.framework, pytest.mark.distributed]

WORKER = Path(__file__).with_name("tf_worker.py")
# Fixed configurations (and switches the test asks for): no live tuner.
ENV = {"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "AUTOBYTE_TUNER": "none"}


def run_job(workers: int, *, shaped: bool, barrier: Path,
            timeout: float = 150) -> list[dict[str, Any]]:
    env = {**ENV, "TF_TEST_BARRIER": str(barrier)}
    if shaped:  # hosts in network namespaces on a 1gbit switch (loopback when not root)
        with Testbed(hosts=workers, rate="1gbit") as tb:
            result = launch(framework="tensorflow", command=[sys.executable, str(WORKER)],
                            workers=workers, env=env, stream=None, timeout=timeout, testbed=tb)
    else:
        result = launch(framework="tensorflow", command=[sys.executable, str(WORKER)],
                        workers=workers, env=env, stream=None, timeout=timeout)
    assert result.returncode == 0, {n: p.output[-3000:] for n, p in result.processes.items()}
    out = []
    for name in sorted(result.processes):
        lines = [x for x in result.processes[name].output.splitlines()
                 if x.startswith("RESULT ")]
        assert lines, result.processes[name].output[-3000:]
        out.append(json.loads(lines[-1][len("RESULT "):]))
    return out


@pytest.mark.parametrize(("workers", "shaped"), [(2, True), (3, False)],
                         ids=["2-workers-testbed", "3-workers-loopback"])
def test_weights_match_plain_mwms(workers: int, shaped: bool, tmp_path: Path) -> None:
    results = run_job(workers, shaped=shaped, barrier=tmp_path)
    assert [r["rank"] for r in results] == list(range(workers))
    for r in results:
        assert r["workers"] == workers
        assert set(r["diff"]) == {"4KiB x1", "8KiB x8", "change 4KiBx4 -> 16KiBx1",
                                  "fused 16KiBx2 -> native -> back", "custom loop"}
        for scenario, diff in r["diff"].items():
            assert diff <= 1e-5, (scenario, diff)
        changed = r["stats"]["change 4KiBx4 -> 16KiBx1"]
        assert changed["config"].startswith("partition=16KiB credit=16KiB")
        assert changed["warmup_steps"] >= 2  # first trace, then the switch
        back = r["stats"]["fused 16KiBx2 -> native -> back"]
        assert back["config"].startswith("partition=16KiB credit=32KiB")
        for scenario, stats in r["stats"].items():
            assert stats["steps"] == 12, scenario
            assert stats["measured_plan"], scenario  # rank 0's layer times replaced the default
            assert stats["samples_per_s"] > 0 and stats["bytes_per_s"] > 0
            # every gradient is counted, per layer (kernel and bias), the sequence Dense's
            # kernel included
            assert stats["layer_bytes"] == [128 + 32, 8192 + 256, 1024 + 16]
            assert len(stats["layer_backward_s"]) == 3
            assert all(t >= 0 for t in stats["layer_backward_s"])
            assert stats["sampled"] >= 1
            assert stats["agreements"] == [4, 0], scenario  # all in the gradients' all-reduce
        for metric, (ours, plain) in r["eval"].items():
            assert ours == pytest.approx(plain, rel=1e-5, abs=1e-6), metric
        assert r["predict"] == [16, 4]
        assert r["jit_error"].startswith("ConfigError: AutoByteStrategy cannot run under "
                                         "jit_compile=True")
    assert len({json.dumps(r["eval"]) for r in results}) == 1  # metrics averaged over workers


BAD_INPUT = textwrap.dedent("""
    import os, json
    import autobyte_tf
    from common.errors import ConfigError
    def attempt(**kw):
        try:
            autobyte_tf.AutoByteStrategy(**kw)
        except ConfigError as exc:
            return str(exc)
        return "no error"
    os.environ["TF_CONFIG"] = "{'cluster': 1}"
    print("malformed:", attempt())
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                          "task": {"type": "worker", "index": 0}})
    print("partition:", attempt(partition_bytes=-1))
    print("unknown:", attempt(partiton_bytes=4096))
    os.environ["TF_XLA_FLAGS"] = "--tf_xla_auto_jit=2"
    print("xla:", attempt())
""")


def test_bad_input_is_refused_before_tensorflow_starts() -> None:
    env = {**os.environ, **ENV}
    env.pop("TF_XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", BAD_INPUT], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["malformed"].startswith("TF_CONFIG is not valid JSON")
    assert "partition_bytes must be positive, between 4096" in lines["partition"]
    assert "partition_bytes=-1" in lines["partition"]
    assert "unknown option(s) ['partiton_bytes']" in lines["unknown"]
    assert "tf_xla_auto_jit" in lines["xla"]


LOCAL = textwrap.dedent("""
    import numpy as np
    import keras
    import autobyte_tf
    strategy = autobyte_tf.AutoByteStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    ends = []

    class End(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(strategy.tuning.end_step)

    history = model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[End()])
    print("workers", strategy.num_workers, "scheduling", strategy.config.scheduling,
          "tuning", strategy.tuning.enabled, "steps", strategy.step)
    print("loss", " ".join(f"{v:.4f}" for v in history.history["loss"]))
    print("ends", sorted(set(ends)), strategy.tuning.end_step)
""")


def test_without_tf_config_it_trains_as_one_local_worker_with_one_note() -> None:
    """As MultiWorkerMirroredStrategy: a script tried on a laptop first runs, scheduling off."""
    env = {k: v for k, v in {**os.environ, **ENV}.items() if k != "TF_CONFIG"}
    env.pop("AUTOBYTE_TUNER")  # the defaults, as a user has them
    proc = subprocess.run([sys.executable, "-c", LOCAL], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == "workers 1 scheduling False tuning False steps 24"
    losses = [float(v) for v in out[1].split()[1:]]
    assert losses[-1] < losses[0] / 2
    assert out[2] == "ends [24] 0"  # fit said where it ends (3 epochs of 8), and after: unknown
    notes = [line for line in proc.stderr.splitlines() if "AutoByte" in line]
    assert len(notes) == 1 and "TF_CONFIG is not set" in notes[0], proc.stderr


LONG_FIT = textwrap.dedent("""
    import sys
    import numpy as np
    import keras
    import autobyte_tf
    strategy = autobyte_tf.AutoByteStrategy(tuner="none")
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((64, 8), "float32")

    class Say(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 5:
                print("training", flush=True)

    model.fit(x, x[:, :1], batch_size=8, epochs=100000, verbose=0, callbacks=[Say()])
""")


def test_workers_stop_promptly_on_sigterm(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM to the launcher: TF workers finish the step and exit, well inside
    the launcher's 5 s grace (TF's preemption notifier used to swallow SIGTERM; a worker whose
    peer exited first waited in the step's collective until the launcher's SIGKILL, about one
    run in five)."""
    script = tmp_path / "long_fit.py"
    script.write_text(LONG_FIT)
    cli = subprocess.Popen(
        [sys.executable, "-m", "common.cli", "launch", "--framework", "tensorflow", "--workers",
         "2", "--timeout", "120", "--", sys.executable, str(script)],
        env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert cli.stdout is not None
        seen = 0
        for line in cli.stdout:
            seen += "training" in line
            if seen == 2:
                break
        started = time.monotonic()
        cli.send_signal(signal.SIGTERM)
        out, _ = cli.communicate(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 143, out[-2000:]
    assert elapsed < 4.0, f"workers took {elapsed:.1f} s to stop:\n{out[-2000:]}"
