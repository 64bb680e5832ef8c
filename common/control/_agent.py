"""TuningAgent: everything an adapter needs on one worker, in three calls.

It owns the statistics collector and the link to the coordinator, and on rank 0 (by default)
also hosts the coordinator, in a child process below the training's priority (on a thread when
the caller hands it tuner or trigger objects, which cannot cross into a process). Nothing it
does can stop training: with no secret, no tuner or no coordinator it keeps collecting, says
why once, and ``poll`` returns None. Its threads are daemons, its sockets linger 0, ``close``
is idempotent and runs at exit.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import zmq

from common.config import (
    CONTROL_ENDPOINT_ENV,
    COORDINATOR_ENV,
    COORDINATOR_TIMEOUT_ENV,
    Config,
    environment,
)
from common.control._coordinator import Coordinator
from common.control._decision import Decision
from common.control._hosted import HostedCoordinator
from common.control._link import Link
from common.control._loop import TunerLike
from common.control._tuners import make_tuner
from common.control._wire import SECRET_ENV, Signer, Verifier, secret_from_env, worker_name
from common.decision_log import DecisionLog, default_log_path
from common.errors import ConfigError
from common.stats import StatsCollector, TrainingStats, Window
from common.trigger import Trigger

__all__ = ["CONTROL_ENDPOINT_ENV", "COORDINATOR_ENV", "Tuned", "TuningAgent", "adapter_options"]

log = logging.getLogger(__name__)

DEAD_AFTER_S = 10.0  # the coordinator silent this long: train on with the configuration in force
HOSTED_WORKERS_HINT = 16  # above this, suggest a standalone coordinator (benchmarks/stats_bench.py)


class TuningAgent:
    """See ``common.control`` for the adapter-facing summary."""

    def __init__(self, *, rank: int, num_workers: int, config: Config, model: str = "unknown",
                 arch: str = "allreduce", endpoint: str | None = None,
                 host_coordinator: bool | None = None, secret: bytes | str | None = None,
                 tuner: TunerLike | None = None, trigger: Trigger | None = None,
                 decision_log: str | os.PathLike[str] | None = None,
                 lead_steps: int | None = None, lead_s: float = 0.3, heartbeat_s: float = 1.0,
                 dead_after_s: float | None = None, max_age_s: float = 60.0,
                 environ: Mapping[str, str] | None = None, guard: bool = True,
                 host_process: bool | None = None) -> None:
        env = os.environ if environ is None else environ
        if dead_after_s is None:
            dead_after_s = environment(COORDINATOR_TIMEOUT_ENV, env) or DEAD_AFTER_S
        for name, value in (("heartbeat_s", heartbeat_s), ("dead_after_s", dead_after_s),
                            ("max_age_s", max_age_s)):
            if not value > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {name}={value!r}")
        self.rank, self.num_workers = rank, num_workers
        self._heartbeat_s = heartbeat_s
        self._config = config
        self._inbox: collections.deque[Decision] = collections.deque()
        self._seen: tuple[str, int] = ("", 0)
        self._due: Decision | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        self._link: Link | None = None
        self._ctx: zmq.Context[Any] | None = None
        self.coordinator: Coordinator | HostedCoordinator | None = None
        self.last_step = -1
        self._collector = StatsCollector(rank=rank, num_workers=num_workers, config=config,
                                         model=model, arch=arch, on_window=self._send_window)
        self.enabled = False
        self.why_disabled = ""
        if config.tuner == "none":
            self.why_disabled = "tuner='none'"
            log.debug("live tuning is off (tuner='none'); training uses %s", config.describe())
            return
        external = environment(COORDINATOR_ENV, env)
        endpoint = endpoint or external or environment(CONTROL_ENDPOINT_ENV, env)
        host = (rank == 0 and not external) if host_coordinator is None else host_coordinator
        if endpoint is None:
            if not (host and num_workers == 1):
                self._disable(
                    f"the coordinator's address is unknown: pass endpoint= (e.g. "
                    f"'tcp://<rank 0 host>:5599'), or set {CONTROL_ENDPOINT_ENV} (rank 0 hosts "
                    f"it; `autobyte launch` sets it) or {COORDINATOR_ENV} (a standalone one)")
                return
            endpoint = "tcp://127.0.0.1:*"
        key = secret.encode() if isinstance(secret, str) else secret
        key = key or secret_from_env(env)
        if key is None and host and num_workers == 1:
            key = os.urandom(32)
        if key is None:
            self._disable(f"{SECRET_ENV} is not set (launch with `autobyte launch`, which sets "
                          "one per job, or export the same random value to every process)")
            return
        if host and num_workers > HOSTED_WORKERS_HINT:
            log.warning("rank 0 hosts the coordinator for %d workers: merging their windows "
                        "costs rank 0 about 0.5 ms per worker per window; for large jobs run "
                        "`autobyte coordinator` on another host and set %s", num_workers,
                        COORDINATOR_ENV)
        if host_process is None:  # tuner and trigger objects cannot cross into a process
            host_process = tuner is None and trigger is None
        if host:
            try:
                if host_process:
                    self.coordinator = HostedCoordinator(
                        bind=endpoint, num_workers=num_workers, config=config, secret=key,
                        lead_steps=lead_steps, lead_s=lead_s, heartbeat_s=heartbeat_s,
                        max_age_s=max_age_s, guard=guard,
                        log_path=decision_log or default_log_path())
                else:
                    self.coordinator = Coordinator(
                        bind=endpoint, num_workers=num_workers, config=config, secret=key,
                        tuner=tuner if tuner is not None else make_tuner(config.tuner,
                                                                         base=config),
                        trigger=trigger, lead_steps=lead_steps, lead_s=lead_s,
                        heartbeat_s=heartbeat_s, max_age_s=max_age_s,
                        tuner_name=config.tuner, decision_log=_open_log(decision_log),
                        guard=guard).start()
            except Exception as exc:  # hosting must never stop training: say why, go on
                self._disable(f"cannot host the coordinator: {exc}")
                return
            endpoint = self.coordinator.endpoint
        self._ctx = zmq.Context()
        self._link = Link(
            ctx=self._ctx, endpoint=endpoint,
            signer=Signer(secret=key, sender=worker_name(rank)),
            verifier=Verifier(secret=key, max_age_s=max_age_s, accept=("decision", "heartbeat")),
            hello={"rank": rank, "num_workers": num_workers, "config": config.to_dict(),
                   "lead_steps": lead_steps or 0},
            heartbeat_s=heartbeat_s, dead_after_s=dead_after_s,
            on_decision=self._on_decision, describe_config=lambda: self._config.describe(),
            progress=lambda: self.last_step)
        self._link.start()
        self.enabled = True
        atexit.register(self.close)

    @property
    def config(self) -> Config:
        """The configuration in force on this worker (as last told by ``set_config``)."""
        return self._config

    @property
    def endpoint(self) -> str | None:
        return None if self._link is None else self._link.endpoint

    @property
    def coordinator_alive(self) -> bool:
        return self._link is not None and self._link.alive

    def peers(self) -> str:
        """What this worker knows of the others, for an error about a stall: the workers the
        coordinator has not heard for a while, or how long the coordinator has been silent."""
        if self._link is None:
            return ""
        said = [f"the coordinator has not heard {sender} for {info.get('silent_s', 0):.0f} s "
                + ("(never since it started)" if info.get("step") is None else
                   f"(last at step {info['step']})")
                for sender, info in sorted(self._link.silent.items())]
        quiet = time.monotonic() - self._link.last_heard
        if quiet > 3 * self._heartbeat_s:
            said.append(f"the coordinator has been silent for {quiet:.0f} s")
        return "; ".join(said)

    @property
    def window_steps(self) -> int:
        return self._collector.window_steps

    def set_layer_bytes(self, layer_bytes: Sequence[int]) -> None:
        """Gradient bytes per layer in forward order (once, or when the model changes)."""
        self._collector.set_layer_bytes(layer_bytes)

    def expect_steps(self, steps: int, *, step: int) -> None:
        """The job runs ``steps`` more steps from ``step`` on (0: unknown), so the coordinator
        starts no try the job ends before it can pay back."""
        if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 0:
            raise ConfigError(f"steps must be a whole number >= 0 (0: unknown), got "
                              f"steps={steps!r}")
        self._collector.set_end_step(step + int(steps) if steps else 0)

    def statistics(self) -> TrainingStats:
        """What this worker measured (totals, the latest window's rates), tuning on or off."""
        return self._collector.summary()

    @property
    def end_step(self) -> int:
        """The step the job ends at, as told by ``expect_steps`` (0: unknown)."""
        return self._collector.end_step

    def record_step(self, step: int, samples: int, step_time_s: float, *,
                    layer_backward_s: Sequence[float] | npt.NDArray[np.float64] | None = None,
                    bytes_up: int = 0, bytes_down: int = 0, comm_s: float = 0.0,
                    warmup: bool = False) -> None:
        """Every step, on the training thread; costs microseconds (benchmarks/stats_bench.py).
        ``warmup``: the step traced or compiled; it is counted apart from the speed."""
        self.last_step = step
        self._collector.record_step(step, samples, step_time_s,
                                    layer_backward_s=layer_backward_s, bytes_up=bytes_up,
                                    bytes_down=bytes_down, comm_s=comm_s, warmup=warmup)

    def poll(self) -> Decision | None:
        """The newest decision not returned before, or None. Never blocks."""
        decision = None
        while self._inbox:  # popleft only: the link thread may append meanwhile
            decision = self._inbox.popleft()
        if decision is None:
            return None
        if decision.step <= self.last_step:
            log.debug("decision %d for step %d heard at step %d: too late for that step "
                        "(the adapters' own agreement decides)", decision.id, decision.step,
                        self.last_step)
        return decision

    def due(self, step: int) -> Config | None:
        """For adapters that agree through their own channel: the configuration of the newest
        decision whose step is ``step`` or earlier (a later one waits here), else None.

        Call it on every rank just before the adapter's agreement for ``step``; rank 0's answer
        is what the adapter broadcasts. A decision heard too late still applies, one agreement
        later, at the same step on every worker.
        """
        decision = self.poll()
        if decision is not None:
            self._due = decision
        pending = self._due
        if pending is None or pending.step > step:
            return None
        self._due = None
        return None if pending.config == self._config else pending.config

    def set_config(self, config: Config, *, step: int) -> None:
        """The adapter switched to ``config`` from ``step`` on: new windows measure it."""
        self._config = config
        self._collector.set_config(config, step=step)

    def applied(self, decision: Decision) -> None:
        self.set_config(decision.config, step=decision.step)

    def close(self) -> None:
        """Stop the link (and the hosted coordinator); idempotent, also runs at exit."""
        if os.getpid() != self._pid:
            return  # a forked child (e.g. a data-loader worker): the parent owns the sockets
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self._link is not None:
            self._link.stop()
            self._link.join(timeout=1.0)
            if self._link.is_alive():
                log.warning("control link did not stop within 1 s; leaving it (daemon)")
            elif self._ctx is not None:
                self._ctx.term()
        if self.coordinator is not None:
            self.coordinator.close()

    def __enter__(self) -> TuningAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send_window(self, window: Window) -> None:
        if self._link is not None:
            self._link.outbox.append(("report", {"window": window.to_dict()}))

    def _on_decision(self, decision: Decision) -> None:
        session, last = self._seen
        if decision.session == session and decision.id <= last:
            return
        self._seen = (decision.session, decision.id)
        self._inbox.append(decision)

    def _disable(self, why: str) -> None:
        self.why_disabled = why
        log.warning("live tuning is off on worker %d: %s; training uses %s", self.rank, why,
                    self._config.describe())


class Tuned:
    """The tuning surface both adapters share, over their ``_agent`` and ``step``."""

    _agent: TuningAgent

    @property
    def step(self) -> int:
        """Steps run so far (each adapter counts its own)."""
        raise NotImplementedError

    @property
    def tuning(self) -> TuningAgent:
        """The live-tuning agent (``enabled``, ``why_disabled``, ``coordinator``)."""
        return self._agent

    def statistics(self) -> TrainingStats:
        """What this worker measured: steps, the latest window's step time, samples/s and
        bytes/s, per-layer backward times (what the tuner sees; tuning on or off)."""
        return self._agent.statistics()

    def expect_steps(self, steps: int) -> None:
        """The job runs ``steps`` more steps (0: unknown; ``model.fit`` tells it itself): live
        tuning then starts no try the job ends before it can pay back."""
        self._agent.expect_steps(steps, step=self.step)


def adapter_options(tuning: Mapping[str, Any] | None) -> dict[str, Any]:
    """An adapter's ``tuning=`` keywords for its TuningAgent, refusing the ones it sets."""
    options = dict(tuning or {})
    taken = sorted(set(options) & {"rank", "num_workers", "config", "model", "arch"})
    if taken:
        raise ConfigError(f"tuning= must not set {taken}: the adapter sets them (name the model "
                          "with model_name=, the knobs with config= or keywords)")
    return options


def _open_log(path: str | os.PathLike[str] | None) -> DecisionLog:
    target = path or default_log_path()
    try:
        return DecisionLog(target)
    except OSError as exc:
        log.warning("cannot write the decision log %s (%s); tuning goes on without it", target,
                    exc)
        return DecisionLog(None)
