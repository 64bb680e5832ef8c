"""AutoByte vs native dist_sync with real ps-lite processes: same parameters after training.

With 2 workers the server's sum is order-free (a + b == b + a in float32) and the optimizer
runs the same operator on workers as on servers and on a slice as on a whole tensor, so
parameters must match bitwise, whatever the blocks (fused, split, or each tensor whole) and
wherever the optimizer runs (on the one server by Gluon's default, as with native; on the
workers with update_on_kvstore=False). With 3 workers the server adds pushes in
arrival order, which differs from run to run for native dist_sync too, so they match native
within float32 rounding (rtol 1e-5, atol 1e-6) and each other bitwise (every worker pulls the
same sums).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import JOB_ENV, WORKER, NativeRefs, assert_ok, job_dir, run_job, skip_without_mxnet

skip_without_mxnet()

pytestmark = [pytest.mark.framework, pytest.mark.distributed, pytest.mark.slow]

MLP = ("--model", "mlp", "--steps", "8")
# the MLP's gradients in forward order: dense0 (64x300 + 300), dense1 (300x200 + 200),
# dense2 (200x10 + 10) float32
MLP_BYTES = 4 * (64 * 300 + 300 + 300 * 200 + 200 + 200 * 10 + 10)


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], *,
                exact: bool) -> None:
    assert got.keys() == want.keys()
    for name in want:
        if exact:
            assert np.array_equal(got[name], want[name]), (
                f"{name}: max diff {np.abs(got[name] - want[name]).max()}")
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6,
                                       err_msg=name)


@pytest.mark.parametrize(("partition", "credit"), [("4KiB", "4KiB"), ("64KiB", "1MiB"),
                                                  ("4MiB", "4MiB")])
def test_blocks_match_native_bitwise(tmp_path: Path, native_refs: NativeRefs, partition: str,
                                     credit: str) -> None:
    """4 KiB and 64 KiB split dense1_weight and fuse the small tensors around the cuts; 4 MiB
    fuses all six tensors into one block."""
    want = native_refs.get(*MLP, workers=2, servers=1)
    job = run_job(tmp_path, *MLP, "--partition", partition, "--credit", credit)
    assert_ok(job)
    for rank in range(2):
        assert_same(job.params(rank), want.params(rank), exact=True)
    steps = job.summary(0)["steps"]
    size = job.summary(0)["config"]["partition_bytes"]
    assert steps and all(s["config"]["partition_bytes"] == size for s in steps)
    blocks = steps[-1]["chunks"]
    assert sum(c["nbytes"] for c in blocks) == MLP_BYTES == steps[-1]["bytes_up"]
    assert len(blocks) == -(-MLP_BYTES // size)  # the fewest blocks the partition allows
    assert sorted(c["nbytes"] for c in blocks)[1:] == [size] * (len(blocks) - 1)
    if len(blocks) == 1:
        assert blocks[0]["tensor"].endswith("dense0_weight+5")
    else:
        assert any("dense0_weight+" in c["tensor"] for c in blocks)  # its tail, bias, ...
    assert all(s["comm_s"] > 0 for s in steps)


def test_scheduling_off_matches_native_bitwise(tmp_path: Path, native_refs: NativeRefs) -> None:
    want = native_refs.get(*MLP, workers=2, servers=1)
    job = run_job(tmp_path, *MLP, "--scheduling", "0")
    assert_ok(job)
    assert_same(job.params(1), want.params(1), exact=True)
    steps = job.summary(0)["steps"]
    # whole tensors, each timed on sampled (odd) steps; the others are timed as a whole
    assert [len(s["chunks"]) for s in steps] == [6 if s["step"] % 2 else 0 for s in steps]
    assert all(s["bytes_up"] == MLP_BYTES for s in steps if s["chunks"])
    assert all(s["duration_s"] > 0 for s in steps)


def test_live_reconfiguration_two_workers(tmp_path: Path, native_refs: NativeRefs) -> None:
    """Two-step windows: the workers agree in each window's last step (kvstore steps 1, 3,
    5, 7) and switch at its end. Rank 0 asks after loop steps 0, 3, 5 (kvstore steps 1, 4,
    6); each request rides the next window's agreement and lands at steps 4, 6 and 8."""
    args = (*MLP, "--steps", "9")  # the summary holds the steps before the last
    want = native_refs.get(*args, workers=2, servers=1)
    job = run_job(tmp_path, *args, "--partition", "1MiB", "--credit", "4MiB",
                  "--switch", "0:8KiB:16KiB:1", "--switch", "3:4KiB:64KiB:0",
                  "--switch", "5:32KiB:32KiB:1", env={"AUTOBYTE_WINDOW_STEPS": "2"})
    assert_ok(job)
    for rank in range(2):
        assert_same(job.params(rank), want.params(rank), exact=True)
    seen = [[(s["step"], s["config"]["partition_bytes"], s["config"]["scheduling"])
             for s in job.summary(r)["steps"]] for r in range(2)]
    assert seen[0] == seen[1], "workers switched at different steps"
    by_step = {step: (part, sched) for step, part, sched in seen[0]}
    assert by_step[1] == by_step[2] == by_step[3] == (1 << 20, True)
    assert by_step[4] == by_step[5] == (8 << 10, True)
    assert by_step[6][1] is False and by_step[7][1] is False
    assert by_step[8] == (32 << 10, True)
    # the planned order is shared: both workers start blocks in the same sequence (with
    # scheduling off nothing is admitted: each tensor goes when its gradient is ready)
    for s0, s1 in zip(job.summary(0)["steps"], job.summary(1)["steps"], strict=True):
        if not s0["config"]["scheduling"]:
            continue
        order = [[(c["tensor"], c["index"]) for c in s["chunks"]] for s in (s0, s1)]
        assert order[0] == order[1], f"step {s0['step']}: admission order differs"


def test_optimizer_on_the_server_matches_native_across_switches_back(
        tmp_path: Path, native_refs: NativeRefs) -> None:
    """Gluon's default with one server: the optimizer runs on the server, as with native
    dist_sync, on blocks that change while training. Switches go from split 4 KiB blocks to
    a smaller credit (the same blocks), native, native with other knobs (the same keys),
    back to 4 KiB (whose server keys then hold stale weights and are refreshed), to one fused
    block and back to native; SGD with momentum keeps its state through all of them."""
    args = (*MLP, "--steps", "14")
    want = native_refs.get(*args, workers=2, servers=1)
    job = run_job(tmp_path, *args, "--partition", "4KiB", "--credit", "8KiB", "--checks",
                  "--switch", "0:4KiB:4KiB:1", "--switch", "2:4KiB:4KiB:0",
                  "--switch", "4:4MiB:4MiB:0", "--switch", "6:4KiB:8KiB:1",
                  "--switch", "8:4MiB:4MiB:1", "--switch", "10:4KiB:4KiB:0")
    assert_ok(job)
    for rank in range(2):
        assert job.summary(rank)["update_on_kvstore"] is True
        assert_same(job.params(rank), want.params(rank), exact=True)
    layouts = [(s["config"]["partition_bytes"] >> 10, s["config"]["credit_bytes"] >> 10)
               if s["config"]["scheduling"] else 0 for s in job.summary(0)["steps"]]
    assert layouts[:13] == [(4, 8)] * 2 + [(4, 4)] * 2 + [0] * 4 + [(4, 8)] * 2 + \
        [(4096, 4096)] * 2 + [0]
    assert job.summary(0)["checks"]["save_states"] == "no error"
    checks = job.summary(1)["checks"]
    assert "runs on rank 0 only (this is rank 1)" in checks["save_states"]
    assert "LAMB is not one of MXNet's element-wise optimizers" in checks["errors"]["set_optimizer"]
    # a plain push is an optimizer step there too: SGD from 0 with the sum 1 + 2 of ones
    assert checks["push_pull_sum"] == pytest.approx(-0.05 * 3 / 16)


def test_adam_on_the_server_counts_each_tensor_once_a_step(tmp_path: Path,
                                                          native_refs: NativeRefs) -> None:
    """Adam's bias correction uses each tensor's update count: split into many blocks, a
    tensor must still count one update a step, also across a switch to native and back."""
    args = (*MLP, "--optimizer", "adam")
    want = native_refs.get(*args, workers=2, servers=1)
    job = run_job(tmp_path, *args, "--partition", "8KiB", "--credit", "16KiB",
                  "--switch", "1:8KiB:8KiB:0", "--switch", "3:8KiB:16KiB:1")
    assert_ok(job)
    for rank in range(2):
        assert_same(job.params(rank), want.params(rank), exact=True)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_optimizer_on_two_servers_matches_native_across_switches(
        tmp_path: Path, native_refs: NativeRefs, optimizer: str) -> None:
    """Gluon's default with two servers: the optimizer runs on both, each element pinned to
    one server whatever the layout. The bound at which the native store spreads a key over
    the servers is lowered so that dense1_weight (60000 elements) is spread, by native and by
    AutoByte alike; switches go through split blocks, native, one block per server and
    back, and the weights equal native's bitwise (Adam's update counts included)."""
    env = {"MXNET_KVSTORE_BIGARRAY_BOUND": "20000"}
    args = (*MLP, "--steps", "10", "--optimizer", optimizer)
    want = native_refs.get(*args, workers=2, servers=2, env=env)
    job = run_job(tmp_path, *args, "--partition", "8KiB", "--credit", "16KiB",
                  "--switch", "1:8KiB:16KiB:0", "--switch", "3:4MiB:4MiB:1",
                  "--switch", "5:8KiB:16KiB:1", workers=2, servers=2, env=env)
    assert_ok(job)
    for rank in range(2):
        assert job.summary(rank)["update_on_kvstore"] is True
        assert want.summary(rank)["update_on_kvstore"] is True
        assert_same(job.params(rank), want.params(rank), exact=True)
    steps = job.summary(0)["steps"]
    layouts = [s["config"]["partition_bytes"] if s["config"]["scheduling"] else 0
               for s in steps]
    assert layouts[:9] == [8 << 10] * 3 + [0] * 2 + [4 << 20] * 2 + [8 << 10] * 2
    fused = next(s for s in steps if s["config"]["partition_bytes"] == 4 << 20
                 and s["chunks"])
    assert len(fused["chunks"]) >= 2  # a 4 MiB partition still needs a block per server


def test_state_on_two_servers_saves_and_loads_as_on_the_workers(tmp_path: Path) -> None:
    """Adam on two servers (dense1_weight spread over both, blocks split): after step 4
    rank 0 saves the state and every worker loads it back halved. The state saved, its update
    counts and the final weights equal bitwise those of the same job with Adam on the workers
    (saved by each Trainer), and the halving changed the weights."""
    env = {"MXNET_KVSTORE_BIGARRAY_BOUND": "20000"}
    args = (*MLP, "--optimizer", "adam", "--partition", "8KiB", "--credit", "16KiB",
            "--switch", "1:8KiB:16KiB:0", "--switch", "2:8KiB:16KiB:1")
    servers = run_job(tmp_path, *args, "--states-at", "4", workers=2, servers=2, env=env)
    workers = run_job(tmp_path, *args, "--states-at", "4", "--update-on-kvstore", "0",
                      workers=2, servers=2, env=env)
    plain = run_job(tmp_path, *args, workers=2, servers=2, env=env)
    for job in (servers, workers, plain):
        assert_ok(job)
    assert servers.summary(0)["update_on_kvstore"] is True
    assert workers.summary(0)["update_on_kvstore"] is False
    for rank in range(2):
        with np.load(servers.out / f"states_rank{rank}.npz") as a, \
                np.load(workers.out / f"states_rank{rank}.npz") as b:
            assert sorted(a.files) == sorted(b.files) and len(a.files) == 12  # 6 x (mean, var)
            for name in a.files:
                assert np.array_equal(a[name], b[name]), name
        assert servers.summary(rank)["update_counts"] == \
            workers.summary(rank)["update_counts"] == {str(i): 5 for i in range(6)}
        assert_same(servers.params(rank), workers.params(rank), exact=True)
        assert any(not np.array_equal(servers.params(rank)[n], plain.params(rank)[n])
                   for n in plain.params(rank))


def test_optimizer_on_the_workers_when_asked(tmp_path: Path, native_refs: NativeRefs) -> None:
    """update_on_kvstore=False: the servers only sum, the Trainer updates, same weights."""
    want = native_refs.get(*MLP, workers=2, servers=1)
    job = run_job(tmp_path, *MLP, "--update-on-kvstore", "0", "--partition", "4KiB",
                  "--credit", "4KiB", "--switch", "1:4KiB:4KiB:0", "--switch", "3:4KiB:4KiB:1")
    assert_ok(job)
    assert job.summary(0)["update_on_kvstore"] is False
    for rank in range(2):
        assert_same(job.params(rank), want.params(rank), exact=True)


@pytest.mark.parametrize(("workers", "servers", "update_on_kvstore"),
                         [(2, 1, "0"), (3, 2, "1")])
def test_two_devices_per_worker_match_native(tmp_path: Path, native_refs: NativeRefs,
                                             workers: int, servers: int,
                                             update_on_kvstore: str) -> None:
    """Each worker trains on two CPU contexts (half the batch each), as MXNet's cifar10
    example does on GPUs: the devices' gradients are summed on the worker, then over workers,
    and every device gets the result. Switches go through split blocks, native and a fused
    block; with the optimizer on the server its state stays right through them. The
    reference is native with the optimizer on the server wherever AutoByte's runs (the same
    operator on the same sums): native with update_on_kvstore=False and two devices lost sums
    now and then (1 of 4 runs, max diff 0.5), AutoByte's results never varied."""
    args = (*MLP, "--devices", "2")
    want = native_refs.get(*args, workers=workers, servers=servers)
    args = (*args, "--update-on-kvstore", update_on_kvstore)
    job = run_job(tmp_path, *args, "--partition", "4KiB", "--credit", "8KiB",
                  "--switch", "0:4KiB:4KiB:0", "--switch", "2:4MiB:4MiB:1",
                  "--switch", "4:4KiB:8KiB:1", workers=workers, servers=servers)
    assert_ok(job)
    for rank in range(workers):
        summary = job.summary(rank)
        assert summary["devices_equal"] and want.summary(rank)["devices_equal"]
        assert want.summary(rank)["update_on_kvstore"] is True
        assert summary["update_on_kvstore"] is (update_on_kvstore == "1")
        assert_same(job.params(rank), want.params(rank), exact=workers == 2)
        assert_same(job.params(rank), job.params(0), exact=True)
    layouts = [s["config"]["partition_bytes"] if s["config"]["scheduling"] else 0
               for s in job.summary(0)["steps"]]
    assert layouts[:7] == [4 << 10] * 2 + [0] * 2 + [4 << 20] * 2 + [4 << 10]


@pytest.mark.parametrize(("workers", "servers"), [(2, 1), (2, 2), (3, 2)])
def test_two_bit_compression_matches_native_across_switches(
        tmp_path: Path, native_refs: NativeRefs, workers: int, servers: int) -> None:
    """MXNet's 2-bit compression (the Trainer's compression_params, the optimizer on the
    workers): each block is quantized with residuals per element, which stay with their
    elements through split blocks, native, one fused block and back, so the weights equal
    bitwise those of dist_sync with 2-bit compression of each whole tensor (done by the
    worker program, ``emulate_two_bit`` says why). The threshold is small enough that most
    elements go out only later, through their residuals. The reference runs one server
    whatever the job runs: the sums are the same, and native's emulated compression with two
    servers gave another result now and then under CPU contention (``emulate_two_bit``).
    With 3 workers the servers add in arrival order: within float32 rounding of native,
    bitwise across workers."""
    args = (*MLP, "--steps", "10", "--compression", "0.01", "--update-on-kvstore", "0")
    want = native_refs.get(*args, workers=workers, servers=1)
    plain = native_refs.get(*MLP, "--steps", "10", "--update-on-kvstore", "0",
                            workers=workers, servers=1)
    job = run_job(tmp_path, *args, "--partition", "4KiB", "--credit", "8KiB",
                  "--switch", "1:4KiB:4KiB:0", "--switch", "3:4MiB:4MiB:1",
                  "--switch", "5:4KiB:8KiB:1", workers=workers, servers=servers)
    assert_ok(job)
    for rank in range(workers):
        assert_same(job.params(rank), want.params(rank), exact=workers == 2)
        assert_same(job.params(rank), job.params(0), exact=True)
        assert any(not np.array_equal(want.params(rank)[n], plain.params(rank)[n])
                   for n in want.params(rank))  # compression changed the result
    layouts = [s["config"]["partition_bytes"] if s["config"]["scheduling"] else 0
               for s in job.summary(0)["steps"]]
    assert layouts[:8] == [4 << 10] * 3 + [0] * 2 + [4 << 20] * 2 + [4 << 10]


@pytest.mark.parametrize(("compression", "message"), [
    ('{"type": "1bit"}', "gradient compression type '1bit'"),
    ("0.5", "compression with the optimizer on the workers only")])
def test_compression_it_cannot_run_is_refused_clearly(tmp_path: Path, compression: str,
                                                      message: str) -> None:
    """Other types than 2-bit; 2-bit with the optimizer on the server (Gluon's default with
    one server), which says how to move it to the workers."""
    job = run_job(tmp_path, *MLP, "--compression", compression, timeout=60)
    assert not job.result.ok and not job.result.timed_out
    text = job.output("worker0")
    assert message in text, text[-2000:]
    assert "{'type': '2bit', 'threshold': t}" in text or "update_on_kvstore=False" in text


def test_an_optimizer_that_is_not_element_wise_is_refused_clearly(tmp_path: Path) -> None:
    job = run_job(tmp_path, *MLP, "--optimizer", "lamb", timeout=60)
    assert not job.result.ok and not job.result.timed_out
    text = job.output("worker0")
    assert "LAMB is not one of MXNet's element-wise optimizers" in text, text[-2000:]
    assert "update_on_kvstore=False" in text


def test_scheduling_off_pull_after_pushpull_reads_the_sum(tmp_path: Path) -> None:
    """With scheduling off a pushpull's sum goes straight into its output; a later pull of
    the key must still return the sum, not the gradient sent (the buffer pushed holds it:
    native's pushpull receives into the array it pushed)."""
    job = run_job(tmp_path, *MLP, "--scheduling", "0", "--update-on-kvstore", "0", "--checks")
    assert_ok(job)
    checks = job.summary(1)["checks"]
    assert checks["list_pushpull"] == [3.0, 6.0]
    assert checks["pull_after_pushpull"] == 3.0
    assert checks["push_pull_sum"] == 3.0


def test_three_workers_two_servers_with_reconfiguration(tmp_path: Path,
                                                        native_refs: NativeRefs) -> None:
    """Switches (each lands three steps after its loop step): 8 KiB (split), 64 KiB, native,
    then 4 MiB (one fused block per server), with the optimizer on both servers (Gluon's
    default)."""
    want = native_refs.get(*MLP, workers=3, servers=2)
    job = run_job(tmp_path, *MLP, "--partition", "8KiB", "--credit", "8KiB",
                  "--switch", "0:64KiB:256KiB:1", "--switch", "2:4KiB:4KiB:0",
                  "--switch", "4:4MiB:4MiB:1", workers=3, servers=2)
    assert_ok(job)
    for rank in range(3):
        assert_same(job.params(rank), want.params(rank), exact=False)
        assert_same(job.params(rank), job.params(0), exact=True)
    seen = [(s["config"]["partition_bytes"] if s["config"]["scheduling"] else 0,
             len(s["chunks"])) for s in job.summary(2)["steps"]]
    # native's step 6 is not sampled (timed as a whole, no blocks); the last step never
    # ends: no statistics
    # with the optimizer on both servers each block holds one server's elements: server 0
    # holds dense0's weight and the last three tensors (21410 elements), server 1 dense0's
    # bias and dense1's weight (60300), each cut on its own
    assert seen == [(8 << 10, 41), (8 << 10, 41), (64 << 10, 6), (64 << 10, 6), (0, 6),
                    (0, 0), (4 << 20, 2)]


def test_cnn_two_servers_string_kvstore_and_api_checks(tmp_path: Path,
                                                       native_refs: NativeRefs) -> None:
    """kvstore='autobyte' as a string (knobs from AUTOBYTE_*), a CNN, 2 servers, and the
    kvstore API with the optimizer on the workers (the servers then sum): states save/load,
    push/pull, list keys, errors for misuse. The reference runs it on the servers (the same
    operator on the same sums)."""
    args = ("--model", "cnn", "--steps", "5")
    want = native_refs.get(*args, workers=2, servers=2)
    job = run_job(tmp_path, *args, "--kv", "autobyte-env", "--checks", "--update-on-kvstore",
                  "0", servers=2,
                  env={"AUTOBYTE_PARTITION_BYTES": "16KiB", "AUTOBYTE_CREDIT_BYTES": "64KiB",
                       "AUTOBYTE_WINDOW_STEPS": "2"})  # windows' last steps: odd ones
    assert_ok(job)
    for rank in range(2):
        assert_same(job.params(rank), want.params(rank), exact=True)
    summary = job.summary(1)
    assert summary["config"]["partition_bytes"] == 16 << 10
    checks = summary["checks"]
    assert checks["states_roundtrip"] and checks["registered"]
    assert checks["push_pull_sum"] == 3.0  # 1 + 2
    assert checks["list_pushpull"] == [3.0, 6.0]
    assert checks["pull_after_pushpull"] == 3.0
    errors = checks["errors"]
    assert "dense gradients only" in errors["sparse"]
    assert checks["two_devices_pushpull"] == [12.0, 12.0]  # (1 + 3) + (2 + 6)
    assert "shape (4,) differs from the initialised shape (5,)" in errors["shapes_differ"]
    assert "never initialised" in errors["unknown_key"]
    assert "dense gradients only" in errors["row_sparse_pull"]
    assert "update_on_kvstore=False" in errors["set_optimizer"]
    sampled = [s for s in summary["steps"] if s["grad_ready_s"]]  # timed per tensor
    assert sampled[0]["step"] == 1  # the first window's last step: always (steps count from 1)
    assert len(sampled[0]["grad_ready_s"]) == 8  # 4 layers x (weight, bias)
    # then when the step time moves or a second passes (timing decides which): odd steps
    assert {s["step"] % 2 for s in sampled} == {1}
    for step in summary["steps"][1:]:  # the batch size is known from the second step
        assert step["bytes_up"] == step["bytes_down"] > 0
        assert step["samples"] == 16 and step["samples_per_s"] > 0
    assert summary["stats_cost_s"] >= 0


@pytest.mark.parametrize("misconfigured", [["--partition-on-rank1", "8KiB"],
                                          ["--window-on-rank1", "3"]])
def test_workers_disagreeing_on_config_fail_clearly(tmp_path: Path,
                                                   misconfigured: list[str]) -> None:
    """Another partition size, or another window (the workers agree at window boundaries,
    so they would wait for each other's control key): both fail at the first exchange."""
    job = run_job(tmp_path, *MLP, "--partition", "64KiB", *misconfigured, timeout=60)
    assert not job.result.ok and not job.result.timed_out
    text = job.output("worker0") + job.output("worker1")
    assert "workers disagree on the AutoByte configuration" in text


@pytest.mark.parametrize("victim", ["worker1", "server0"])
def test_a_process_killed_under_the_launcher_ends_the_job_at_once(tmp_path: Path,
                                                                 victim: str) -> None:
    """SIGKILL of a worker or the server mid-run (real ps-lite, under ``autobyte launch``):
    the launcher ends the job with that process's code within seconds, nothing left."""
    pidfile = tmp_path / "server.pid"
    kill = ["--kill-rank1-at", "22"] if victim == "worker1" else \
        ["--kill-server-at", "22", "--hard"]  # rank 0 has written its mark by then
    out = job_dir(tmp_path)
    job = run_job(tmp_path, "--model", "mlp", "--steps", "100000", "--mark", "20", *kill,
                  out=out, timeout=90, env={"MXTEST_SERVER_PIDFILE": str(pidfile)})
    seconds = time.time() - float((out / "mark_20").read_text())
    print(f"MXNet, {victim} SIGKILLed under the launcher: the job ended {seconds:.1f} s after "
          "step 20")
    assert not job.result.ok and not job.result.timed_out
    assert job.result.failed == victim and job.result.returncode == 128 + signal.SIGKILL, \
        (job.result.failed, job.result.returncode)  # the shell's code for a signal's death
    assert job.result.processes[victim].returncode == -signal.SIGKILL
    assert all(p.returncode is not None for p in job.result.processes.values())
    assert seconds < 10.0


def test_frozen_server_is_reported_not_a_silent_hang(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    job = run_job(tmp_path, *MLP, "--kill-server-at", "2", timeout=90,
                  env={"AUTOBYTE_GRACE_S": "4", "MXTEST_SERVER_PIDFILE": str(pidfile)})
    assert not job.result.ok and not job.result.timed_out
    assert job.result.returncode == 75
    text = job.output("worker0") + job.output("worker1")
    assert "no communication progress" in text and "server" in text


def test_a_frozen_worker_is_named_by_the_other_within_the_grace_period(tmp_path: Path) -> None:
    """Rank 1 stops itself (SIGSTOP) mid-run: rank 0 waits the grace period, then exits with
    an error naming worker1 and the step it was last heard at (from the coordinator). The
    coordinator names a worker silent for three heartbeats (1 s each) at a heartbeat to rank 0
    up to a second later; the grace period leaves room beyond that."""
    job = run_job(tmp_path, *MLP, "--steps", "400", "--freeze-rank1-at", "20", timeout=90,
                  env={"AUTOBYTE_GRACE_S": "8", "AUTOBYTE_TUNER": "observe"})
    assert not job.result.ok and not job.result.timed_out
    assert job.result.failed == "worker0" and job.result.returncode == 75
    text = job.output("worker0")
    assert "no communication progress for" in text, text[-2000:]
    assert "the coordinator has not heard worker1 for" in text, text[-2000:]


@pytest.mark.parametrize("victim", ["worker1", "server0"])
def test_without_the_launcher_every_process_ends_after_one_is_killed(
        tmp_path: Path, victim: str) -> None:
    """Started the way a cluster manager starts them (DMLC_* set, no ``autobyte launch`` to
    stop the rest): SIGKILL of a worker or the server ends every other process, the workers
    through their watchdog (no communication progress), the server and the scheduler through
    their peer watch (an address is gone), each with exit 75 and a message naming what is
    gone, within about two grace periods."""
    from common.launch._plan import plan
    from common.launch._ports import reserve_ports

    grace = 4.0
    reservation = reserve_ports(4)
    specs = plan(framework="mxnet", workers=2, servers=1, addresses=["127.0.0.1"],
                 ports=reservation.ports)
    reservation.release()
    out = job_dir(tmp_path)
    command = [sys.executable, str(WORKER), "--out", str(out), *MLP, "--steps", "100000",
               "--mark", "20"]
    env = {**os.environ, **JOB_ENV, "AUTOBYTE_GRACE_S": str(grace)}
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for spec in specs:
            procs[spec.name] = subprocess.Popen(command, env={**env, **spec.env}, text=True,
                                                stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while not (out / "mark_20").exists():
            assert time.monotonic() < deadline, "the job never reached step 20"
            assert all(p.poll() is None for p in procs.values()), \
                {n: p.poll() for n, p in procs.items()}
            time.sleep(0.1)
        killed = time.monotonic()
        procs[victim].kill()
        ended = {}
        for name in procs:
            if name != victim:
                procs[name].wait(timeout=3 * grace + 30)
                ended[name] = time.monotonic() - killed
        outputs = {n: p.communicate()[0] for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for name, seconds in ended.items():
        last = [line for line in outputs[name].splitlines() if "AutoByte" in line][-1:]
        print(f"{victim} SIGKILLed: {name} exited {seconds:.1f} s after the kill: {last}")
    for name in ended:
        assert procs[name].returncode == 75, (name, procs[name].returncode, outputs[name][-2000:])
        expected = "no communication progress" if name.startswith("worker") else \
            "that process is gone"
        assert expected in outputs[name], (name, outputs[name][-2000:])
    assert max(ended.values()) < 2 * grace + 15, ended
