"""A simulated training worker (or coordinator) for the control plane's multi-process tests.

Worker: steps with a sleep whose length depends on the configuration in force (1MiB partitions
are slow, others fast), uses TuningAgent exactly as an adapter would, applies a decision at
its step when heard in time, and prints JSON lines (decision, applied, done) on stdout.
It never calls agent.close(): exiting promptly must not depend on it.

Coordinator: a Coordinator with a scripted tuner proposing 256KiB/1MiB, served until killed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from common.config import Config
from common.control import Coordinator, TuningAgent, secret_from_env
from common.decision_log import DecisionLog
from common.testing.tuners import ScriptedTuner

FAST = {"partition_bytes": 256 * 1024, "credit_bytes": 1024 * 1024}


def emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def run_worker(args: argparse.Namespace) -> None:
    config = Config.from_env()
    tuner = ScriptedTuner([config.replace(**FAST)] * 3) if args.rank == 0 else None
    agent = TuningAgent(rank=args.rank, num_workers=args.workers, config=config, model="fake",
                        arch="ps", endpoint=args.endpoint, tuner=tuner,
                        host_coordinator=True if args.host else None,
                        heartbeat_s=args.heartbeat, dead_after_s=args.dead_after,
                        decision_log=args.log, lead_s=args.lead_seconds, guard=False)
    agent.set_layer_bytes([4096, 8192])
    emit(event="started", enabled=agent.enabled, endpoint=agent.endpoint)
    pending = None
    for step in range(args.steps):
        if pending is not None and step == pending.step:
            agent.applied(pending)
            emit(event="applied", id=pending.id, step=step, config=agent.config.to_dict())
            pending = None
        slow = agent.config.partition_bytes == 1024 * 1024
        step_time = args.step_time * (1.0 if slow else 0.5)
        time.sleep(step_time)
        agent.record_step(step, 32, step_time, layer_backward_s=[0.001, 0.002],
                          bytes_up=1000, bytes_down=1000)
        decision = agent.poll()
        if decision is not None:
            emit(event="decision", id=decision.id, step=decision.step, heard_at=step,
                 config=decision.config.to_dict())
            if decision.step > step:
                pending = decision
    emit(event="done", t=time.time(), config=agent.config.to_dict(),
         alive=agent.coordinator_alive)


def run_coordinator(args: argparse.Namespace) -> None:
    config = Config.from_env()
    secret = secret_from_env()
    assert secret is not None
    coordinator = Coordinator(bind=args.endpoint, num_workers=args.workers, config=config,
                              secret=secret, tuner=ScriptedTuner([config.replace(**FAST)] * 3),
                              heartbeat_s=args.heartbeat, decision_log=DecisionLog(args.log),
                              lead_s=args.lead_seconds, guard=False)
    emit(event="listening", endpoint=coordinator.endpoint)
    coordinator.run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=("worker", "coordinator"), default="worker")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--endpoint")
    parser.add_argument("--host", action="store_true", help="this worker hosts the coordinator")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-time", type=float, default=0.02)
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--dead-after", type=float, default=1.0)
    parser.add_argument("--log")
    parser.add_argument("--lead-seconds", type=float, default=0.8,
                        help="decision lead: generous, the test machine is shared and loaded")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(name)s %(levelname)s %(message)s")
    if args.role == "worker":
        run_worker(args)
    else:
        run_coordinator(args)


if __name__ == "__main__":
    main()
