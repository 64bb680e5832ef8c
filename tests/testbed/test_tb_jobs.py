"""Real jobs on the testbed (root): ps-lite across namespaces, jobs sharing one testbed."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
import threading

import pytest
from tb_helpers import root_only

from common.launch import LaunchResult, launch
from common.testbed import Testbed

pytestmark = [*root_only, pytest.mark.distributed, pytest.mark.usefixtures("no_leaks")]

# Every worker listens on its TF_CONFIG address, then connects to every peer and reads its
# rank: proves addresses and pinned ports are right and reachable between namespaces.
MESH = textwrap.dedent("""
    import json, os, socket, threading, time
    cfg = json.loads(os.environ["TF_CONFIG"])
    peers, me = cfg["cluster"]["worker"], cfg["task"]["index"]
    host, port = peers[me].rsplit(":", 1)
    server = socket.create_server((host, int(port)))
    server.settimeout(20)
    def serve():
        for _ in range(len(peers) - 1):
            conn, _ = server.accept()
            conn.sendall(str(me).encode())
            conn.close()
    t = threading.Thread(target=serve)
    t.start()
    got = []
    for i, peer in enumerate(peers):
        if i == me:
            continue
        h, p = peer.rsplit(":", 1)
        for _ in range(200):
            try:
                with socket.create_connection((h, int(p)), timeout=5) as c:
                    got.append(int(c.recv(16)))
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
    t.join()
    print(json.dumps({"me": me, "port": int(port), "got": sorted(got)}))
""")

MXNET_JOB = textwrap.dedent("""
    import os
    import numpy
    numpy.bool = numpy.bool_
    import mxnet as mx
    kv = mx.kv.create("dist_sync")
    kv.init(3, mx.nd.zeros((4,)))
    kv.push(3, mx.nd.ones((4,)) * (kv.rank + 1))
    out = mx.nd.zeros((4,))
    kv.pull(3, out=out)
    print("sum", out.asnumpy().tolist(), flush=True)
    print("rank", kv.rank, "AUTOBYTE_RANK", os.environ["AUTOBYTE_RANK"], flush=True)
""")

TF_JOB = textwrap.dedent("""
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    @tf.function
    def step():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.ones([4]) * (rank + 1))
    out = strategy.experimental_local_results(strategy.run(step))[0]
    print("sum", out.numpy().tolist(), flush=True)
""")


def test_two_jobs_share_one_testbed_on_distinct_ports() -> None:
    results: dict[str, LaunchResult] = {}
    with Testbed(hosts=3, rate="1gbit") as tb:
        def run(job: str) -> None:
            results[job] = launch(framework="tensorflow", workers=3, testbed=tb, stream=None,
                                  timeout=60, command=[sys.executable, "-c", MESH])
        threads = [threading.Thread(target=run, args=(job,)) for job in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ports = []
    for job, result in results.items():
        assert result.returncode == 0, (job, {n: p.output for n, p in result.processes.items()})
        for p in result.processes.values():
            line = json.loads(p.output.strip().splitlines()[-1])
            assert line["got"] == sorted({0, 1, 2} - {line["me"]})
            ports.append(line["port"])
    assert len(set(ports)) == 6


@pytest.mark.framework
@pytest.mark.skipif(importlib.util.find_spec("mxnet") is None,  # importing it here needs a numpy
                    reason="needs mxnet==1.9.1 (pip install 'autobyte[mx]')")  # patch first
def test_mxnet_parameter_server_runs_across_namespaces() -> None:
    with Testbed(hosts=3, rate="1gbit") as tb:
        result = launch(framework="mxnet", workers=2, servers=1, testbed=tb, stream=None,
                        timeout=120, env={"OMP_NUM_THREADS": "1"},
                        command=[sys.executable, "-c", MXNET_JOB])
    assert result.returncode == 0, {n: p.output for n, p in result.processes.items()}
    for rank, worker in enumerate(("worker0", "worker1")):
        assert "sum [3.0, 3.0, 3.0, 3.0]" in result.processes[worker].output
        assert f"rank {rank} AUTOBYTE_RANK {rank}" in result.processes[worker].output


@pytest.mark.framework
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,  # only the workers import it
                    reason="needs tensorflow (pip install 'autobyte[tf]')")
def test_tensorflow_collective_runs_across_namespaces() -> None:
    with Testbed(hosts=2, rate="1gbit") as tb:
        result = launch(framework="tensorflow", workers=2, testbed=tb, stream=None,
                        timeout=180, env={"OMP_NUM_THREADS": "1"},
                        command=[sys.executable, "-c", TF_JOB])
    assert result.returncode == 0, {n: p.output[-2000:] for n, p in result.processes.items()}
    for worker in ("worker0", "worker1"):
        assert "sum [3.0, 3.0, 3.0, 3.0]" in result.processes[worker].output
