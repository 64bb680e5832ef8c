"""``autobyte coordinator``: run the tuning coordinator as its own process.

    export AUTOBYTE_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')
    autobyte coordinator --bind tcp://10.0.0.1:5599 --workers 4 --tuner bayesian \\
        --log decisions.jsonl --exit-when-done
    # every worker: AUTOBYTE_COORDINATOR=tcp://10.0.0.1:5599 and the same AUTOBYTE_SECRET

By default rank 0 of a job runs the coordinator in a child process at a lower CPU priority; run
it standalone to keep the tuner (e.g. the meta-network) off the training hosts. Workers that
lose it keep training with the last configuration. Stops on Ctrl-C, SIGTERM or, with
--exit-when-done, when every worker has said bye (exit 0) or one has been silent beyond
AUTOBYTE_GRACE_S (exit 1).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

from common.config import TUNERS, Config
from common.control import Coordinator, ensure_secret, make_tuner
from common.control._wire import SECRET_ENV, secret_from_env
from common.decision_log import DecisionLog, default_log_path
from common.errors import ConfigError
from common.trigger import TRIGGERS
from common.trigger import create as create_trigger

__all__ = ["register"]

log = logging.getLogger(__name__)

_FLAGS = {"tuner": "--tuner", "partition_bytes": "--partition", "credit_bytes": "--credit",
          "window_steps": "--window-steps"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "coordinator", help="run the tuning coordinator (workers report, it decides)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bind", required=True,
                        help="ZeroMQ endpoint to listen on, e.g. tcp://10.0.0.1:5599")
    parser.add_argument("--workers", type=int, required=True, help="workers in the job")
    parser.add_argument("--tuner", choices=TUNERS, help="default: AUTOBYTE_TUNER or 'meta'")
    parser.add_argument("--trigger", choices=TRIGGERS, default="threshold",
                        help="when to switch to a proposal: threshold (a predicted gain above "
                        "the threshold, the default), always, or never (tuning off)")
    parser.add_argument("--partition", help="initial partition size, e.g. 1MiB (default "
                        "AUTOBYTE_PARTITION_BYTES or 1MiB)")
    parser.add_argument("--credit", help="initial credit size, e.g. 4MiB (default "
                        "AUTOBYTE_CREDIT_BYTES or 4MiB)")
    parser.add_argument("--window-steps", type=int, help="steps per statistics window "
                        "(default AUTOBYTE_WINDOW_STEPS or 10)")
    parser.add_argument("--lead-steps", type=int,
                        help="decisions lead the window they are decided on by at least this "
                        "many steps (default 0: each worker says what its adapter needs)")
    parser.add_argument("--lead-seconds", type=float, default=0.3, metavar="SECONDS",
                        help="... plus this long at the measured step time (default 0.3)")
    parser.add_argument("--explore-budget", type=int, default=16, metavar="N",
                        help="configurations a search tuner may try before settling (again "
                        "after each detected change); threshold trigger only")
    parser.add_argument("--seed", type=int, default=0, help="tuner seed (default 0)")
    parser.add_argument("--log", help="decision log (JSONL); default "
                        "$AUTOBYTE_LOG_DIR (or ./autobyte-logs)/decisions-<time>-<pid>.jsonl")
    parser.add_argument("--heartbeat", type=float, default=1.0, metavar="SECONDS",
                        help="seconds between heartbeats to the workers (default 1)")
    parser.add_argument("--max-age", type=float, default=60.0, metavar="SECONDS",
                        help="drop messages whose timestamp is further than this from now "
                        "(default 60)")
    parser.add_argument("--exit-when-done", action="store_true",
                        help="exit once every worker has said bye (0), or one has been "
                        "silent beyond AUTOBYTE_GRACE_S (1)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    config = Config.from_env(tuner=args.tuner, partition_bytes=args.partition,
                             credit_bytes=args.credit, window_steps=args.window_steps,
                             flags=_FLAGS)
    for flag, value in (("--workers", args.workers), ("--heartbeat", args.heartbeat),
                        ("--max-age", args.max_age)):
        if not value > 0:
            raise ConfigError(f"{flag} must be > 0, but got {flag}={value:g}")
    if args.lead_steps is not None and args.lead_steps < 0:
        raise ConfigError(f"--lead-steps must be >= 0, but got --lead-steps={args.lead_steps}")
    if not args.lead_seconds >= 0:
        raise ConfigError(f"--lead-seconds must be >= 0, but got "
                          f"--lead-seconds={args.lead_seconds:g}")
    secret = secret_from_env()
    if secret is None:
        value = ensure_secret()
        print(f"{SECRET_ENV} was not set; this job's secret (give it to every worker):\n"
              f"export {SECRET_ENV}={value}", file=sys.stderr, flush=True)
        secret = value.encode()
    path = args.log or default_log_path()
    coordinator = Coordinator(
        bind=args.bind, num_workers=args.workers, config=config, secret=secret,
        tuner=make_tuner(config.tuner, seed=args.seed, base=config),
        trigger=create_trigger(args.trigger, config=config, **(
            {"explore_budget": args.explore_budget} if args.trigger == "threshold" else {})),
        decision_log=DecisionLog(path), lead_steps=args.lead_steps, lead_s=args.lead_seconds,
        heartbeat_s=args.heartbeat, max_age_s=args.max_age,
        exit_when_done=args.exit_when_done, tuner_name=config.tuner)
    print(f"coordinator on {coordinator.endpoint} for {args.workers} worker(s), tuner "
          f"{coordinator.tuner_name}, log {path}", flush=True)
    previous = signal.signal(signal.SIGTERM, lambda *_: coordinator.request_stop())
    try:
        coordinator.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    rejected = dict(coordinator.verifier.rejected)
    print(f"coordinator stopped; rejected messages: {rejected or 'none'}", flush=True)
    if coordinator.lost:
        lost = ", ".join(f"{sender} (silent {info['silent_s']:.0f} s from step {info['step']})"
                         for sender, info in sorted(coordinator.lost.items()))
        print(f"autobyte coordinator: error: the job lost {lost}", file=sys.stderr, flush=True)
        return 1
    return 0
