"""The coordinator's decision loop, free of sockets: observation in, decision (or none) out.

Per merged window it tells the tuner what the configuration in force achieved, asks for a
proposal with predictions, lets the trigger decide and logs it all; a switch becomes a
Decision at a window boundary far enough ahead that every worker hears of it first. It
measures what switches cost this job, so the trigger makes none that cannot pay back, and
keeps what it measured per conditions; its ``Guard`` (``_guard.py``) reviews every verdict, so
the job does no worse than native. Why each rule is as it is: docs/tuning-loop.md.

Tuners need only ``propose()`` and ``observe(config, speed)``; ``observe_window``,
``predict``, ``candidates``, ``adapt`` and ``reset`` are used when present.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from common.config import Config
from common.control._conditions import RATES, Conditions, Memory
from common.control._decision import Decision
from common.control._guard import Guard
from common.decision_log import DecisionLog
from common.errors import ConfigError
from common.stats import Observation
from common.trigger import Candidate, Trigger, Verdict, knobs

__all__ = ["TunerLike", "TuningLoop"]

log = logging.getLogger(__name__)

_Knobs = tuple[int, int, bool]
CHANGED = 3.0  # a speed this many times off its own measurement: conditions changed
DRIFT = 0.15  # a window this far off its configuration's measurement: the conditions moved
LATE_WINDOWS = 2  # windows a decision may come into force after its step before it is dropped


def _off(value: float | None, measured: float | None) -> bool:
    """``value`` ``CHANGED``-fold or more off ``measured``, both known: the conditions moved."""
    return bool(value and measured and measured > 0 and
                not 1 / CHANGED <= value / measured <= CHANGED)


class TunerLike(Protocol):
    def propose(self) -> Config: ...

    def observe(self, config: Config, speed: float) -> None: ...


class TuningLoop:
    def __init__(self, *, config: Config, tuner: TunerLike | None, trigger: Trigger,
                 decision_log: DecisionLog | None = None, lead_steps: int | None = None,
                 lead_s: float = 0.3, session: str = "", history: int = 5,
                 guard: bool = True, noise_band: float = 0.03, guard_windows: int = 2,
                 veto_windows: int = 30, guard_budget: float = 0.05,
                 explore_share: float | None = 0.02, decide_every_s: float = 1.0) -> None:
        self.current = config
        self.tuner = tuner
        self.trigger = trigger
        self.log = decision_log or DecisionLog(None)
        self.window_steps = config.window_steps
        self.lead_steps = 0 if lead_steps is None else lead_steps
        self.lead_s = lead_s
        self.top_candidates = 4
        if self.lead_steps < 0 or not lead_s >= 0 or not decide_every_s >= 0:
            raise ConfigError(f"lead_steps, lead_s and decide_every_s must be >= 0, got "
                              f"lead_steps={self.lead_steps}, lead_s={lead_s!r}, "
                              f"decide_every_s={decide_every_s!r}")
        self.decide_every_s = decide_every_s
        self._decided_at: float | None = None  # trained_s when a window was last decided on
        self.session = session
        self.pending: Decision | None = None
        self.latest: Decision | None = None
        self._next_id = 1
        self._history: dict[_Knobs, collections.deque[float]] = {}
        self._history_len = history
        self._recent: collections.deque[Observation] = collections.deque(maxlen=20)
        self._tuner_failures: collections.Counter[str] = collections.Counter()
        self._switch_costs: collections.deque[float] = collections.deque(maxlen=3)
        # the same, apart: switches to a configuration new to this job (a first trace, new
        # buffers) and back to one it ran before (a cached trace): a try pays one of each
        self._new_costs: collections.deque[float] = collections.deque(maxlen=3)
        self._back_costs: collections.deque[float] = collections.deque(maxlen=3)
        self.trained_s = 0.0
        self._since_s = 0.0  # trained_s when the conditions last changed
        self._changed = False  # whether they changed in this job
        self._memory = Memory()  # what was measured under conditions the job left
        self.expect_s = 0.0  # how long the conditions in force held the last time (recalled)
        self.before_s = 0.0  # and in all before this time
        self._rates: collections.deque[float] = collections.deque(maxlen=RATES)  # the link's
        self._settling = False  # the window that showed a change: neither measured nor decided
        self.guard = Guard(self, enabled=guard and tuner is not None, noise_band=noise_band,
                           guard_windows=guard_windows, veto_windows=veto_windows,
                           guard_budget=guard_budget, explore_share=explore_share)
        self.lost_s = 0.0  # time this job lost against native: switches, slower windows
        self.window_s = 0.0  # the last window's steady-state time
        self.step_s = 0.0  # and its steps'
        self._last_step = 0  # the last window's last step
        self._end_step = 0  # the step the job ends at, when a worker knows it (0: unknown)
        self._first_cost: float | None = None  # the first window's warm-up (a first trace)
        self._first_window: int | None = None
        self._configs: dict[_Knobs, Config] = {}
        self.native_s: float | None = None  # trained_s at native's last window

    def on_observation(self, obs: Observation, *, latest: bool = True,
                       why: str | None = None) -> Decision | None:
        """Take one merged window. ``latest=False``: a newer window is already here (the
        coordinator fell behind, e.g. while a model compiled) or the coordinator is stopping
        (``why`` says so in the log): the window is measured and logged but not decided on,
        since a decision from it would come due too late."""
        record: dict[str, Any] = {
            "window": obs.window, "first_step": obs.first_step, "last_step": obs.last_step,
            "steps": obs.steps, "config": obs.config, "speed": obs.speed,
            "speed_per_worker": obs.speed_per_worker, "workers": len(obs.ranks),
            "observation": obs,
        }
        if not obs.complete or obs.steps == 0:
            why = "incomplete window" if not obs.complete else "no measured steps"
            self.log.write("window", {**record, "action": "skip", "reason": why})
            return None
        self._recent.append(obs)
        self.trained_s += obs.steps * obs.step_time_s + obs.warmup_s
        self.window_s, self.step_s = obs.steps * obs.step_time_s, obs.step_time_s
        self._last_step, self._end_step = obs.last_step, obs.end_step
        self._check_conditions(obs)
        self._account(obs)
        if self._first_cost is None:
            self._first_cost = max(0.0, obs.warmup_s - obs.warmup_steps * obs.step_time_s)
            self._first_window = obs.window
        self._call("observe", obs.config, obs.speed)
        if self.pending is not None:
            applied = knobs(obs.config) == knobs(self.pending.config)
            due = self.pending.step
            if not applied and obs.first_step < due + LATE_WINDOWS * self.window_steps:
                self._remember(obs)  # an adapter that heard it late applies it a boundary later
                self.log.write("window", {**record, "action": "wait", "reason":
                               f"decision {self.pending.id} applies at step {due}" +
                               (" (late)" if obs.first_step >= due else "")})
                return None
            if applied:
                self.current = self.pending.config
                if obs.warmup_steps:
                    cost = max(0.0, obs.warmup_s - obs.warmup_steps * obs.step_time_s)
                    self._switch_costs.append(cost)
                    new = knobs(obs.config) not in self._configs
                    (self._new_costs if new else self._back_costs).append(cost)
                    self.lost_s += cost
            else:
                log.info("decision %d was not applied by step %d (workers still run %s); "
                         "deciding again", self.pending.id, obs.first_step,
                         obs.config.describe())
                self.log.write("event", {"event": "not_applied", "decision_id": self.pending.id,
                                         "step": self.pending.step})
                self.guard.forget_try()
            self.pending = None
        if knobs(obs.config) != knobs(self.current):
            log.warning("workers report %s but the coordinator expected %s; following them",
                        obs.config.describe(), self.current.describe())
            self.current = obs.config
        if self._settling:
            self.log.write("window", {**record, "action": "wait", "reason": "conditions "
                                      "changed: the next window shows where they settle"})
            return None
        if not latest:
            self._remember(obs)
            self.log.write("window", {**record, "action": "behind", "reason": why or
                                      "a newer window is already here: measured, not "
                                      "decided on"})
            return None
        if self._decided_at is not None and not self.guard.due(obs.speed) and \
                self.trained_s - self._decided_at < self.decide_every_s:
            self._remember(obs)
            self.log.write("window", {**record, "action": "measured", "reason":
                                      f"deciding at most every {self.decide_every_s:g} s of "
                                      "training"})
            return None
        self._decided_at = self.trained_s
        self._call("observe_window", obs)
        predicted_current = self._predict_current(obs)
        self._remember(obs)
        candidates = self._candidates(obs)
        cost = self.switch_cost_s
        verdict = self.trigger.decide(current=self.current, observed=obs.speed,
                                      predicted_current=predicted_current, candidates=candidates,
                                      switch_cost_s=cost, horizon_s=self.horizon_s)
        if verdict.adapt:
            self._adapt()
        guarded = self.guard.review(verdict, candidates, predicted_current) \
            if self.guard.enabled else None
        if guarded is not None:
            self.log.write("event", {"event": "guard", "reason": guarded.reason,
                                     "instead_of": verdict.action,
                                     "instead_config": verdict.config})
            if verdict.action == "switch":
                self.trigger.withdraw()
            verdict = guarded
        decision = self._decide(obs, verdict)
        self.log.write("window", {
            **record, "predicted": predicted_current,
            "candidates": [{"config": c.config, "predicted": c.predicted, "source": c.source}
                           for c in candidates],
            "action": verdict.action, "reason": verdict.reason, "gain": verdict.gain,
            "error": verdict.error, "adapt": verdict.adapt, "next_config": verdict.config,
            "switch_cost_s": cost, "trained_s": self.trained_s, "lost_s": self.lost_s,
            "decision_id": None if decision is None else decision.id,
            "target_step": None if decision is None else decision.step,
        })
        return decision

    @property
    def switch_cost_s(self) -> float:
        """Mean cost of this job's recent switches in seconds; before the first is measured,
        the first window's warm-up (the job's first trace, or buffers), 0 before any window."""
        if self._switch_costs:
            return statistics.fmean(self._switch_costs)
        return self._first_cost or 0.0

    def measured(self, config: Config, *, median: bool = False) -> float | None:
        """Mean observed speed of ``config`` in this job (recent windows), None if never run;
        ``median``: their median, which one window of a fast phase cannot carry."""
        speeds = self._history.get(knobs(config))
        if not speeds:
            return None
        return statistics.median(speeds) if median else statistics.fmean(speeds)

    def runs(self, config: Config) -> int:
        """How many of ``config``'s windows ``measured`` averages."""
        return len(self._history.get(knobs(config), ()))

    def ran(self) -> dict[_Knobs, Config]:
        """Every configuration this job ran, by its knobs."""
        return self._configs

    @property
    def new_cost_s(self) -> float:
        """What a switch to a configuration new to this job costs (a first trace, new
        buffers): its recent mean, else the first window's warm-up."""
        return statistics.fmean(self._new_costs) if self._new_costs else self._first_cost or 0.0

    @property
    def back_cost_s(self) -> float | None:
        """What a switch back to a configuration run before costs (a cached trace), None
        before one is measured."""
        return statistics.fmean(self._back_costs) if self._back_costs else None

    @property
    def horizon_s(self) -> float:
        """How long a switch's gain is expected to last: to the job's end (``left_s``) while
        its conditions have held since it started; once they have changed, or when no worker
        knows where the job ends, as long again as the conditions in force have lasted (a
        link that alternates every few seconds pays for no retrace), or as long as they held
        the last time when they came back and that is longer, or, since what is measured
        under them comes back with them, the share of the time ahead (``left_s``, else as long
        again as the job trained) they held so far if that is longer still: a first trace one
        stretch of an alternating link cannot pay back is paid by all of them. Never past the
        end."""
        if not self._changed and not math.isinf(self.left_s):
            return self.left_s
        stretch = max(self.lasted_s, self.expect_s)
        if self.before_s and self.trained_s > 0:
            ahead = self.trained_s if math.isinf(self.left_s) else self.left_s
            stretch = max(stretch, (self.before_s + self.lasted_s) / self.trained_s * ahead)
        return min(stretch, self.left_s)

    @property
    def lasted_s(self) -> float:
        """Training time under the conditions in force."""
        return self.trained_s - self._since_s

    @property
    def left_s(self) -> float:
        """Training time the job has left once a decision made now is in force, at the last
        window's step time; infinite when no worker knows where the job ends."""
        if self._end_step <= 0:
            return math.inf
        steps = self._end_step - self._last_step - self.lead(self.step_s)
        return max(0, steps) * self.step_s

    def _account(self, obs: Observation) -> None:
        """Add what ``obs`` cost against native to ``lost_s`` (negative: what it gained) when
        it ran a scheduled configuration: its time beyond what native's measured speed would
        have taken. A gain counts only beyond ``noise_band``: native was measured at another
        time, and on a busy machine speeds drift by that much in phases, so a drift must not
        fund tries. (A switch's cost, its warm-up beyond its steps, is added where it is
        measured.)"""
        native = self.measured(obs.config.replace(scheduling=False))
        if obs.config.scheduling and native and obs.speed > 0:
            ratio = obs.speed / native
            if ratio > 1.0:
                ratio = max(1.0, ratio - self.guard.noise_band)
            self.lost_s += obs.steps * obs.step_time_s * (1.0 - ratio)

    def _check_conditions(self, obs: Observation) -> None:
        """A configuration running ``CHANGED`` times faster or slower than this job measured
        it, or a window whose link rate is ``CHANGED``-fold off the rate measured under the
        conditions in force, means the conditions changed: every speed measured before describes
        another job, so it goes, with the trigger's memory and the tuner's observations,
        whether or not the predictor may adapt yet. What it measured is kept (``Memory``).
        The window that shows the change may hold steps of both conditions, so it is neither
        measured nor decided on (``_settling``); the next one tells whether the conditions are
        ones seen before (``_recall``)."""
        if self._settling:
            self._settling = False
            self._recall(obs)
            return
        past = self.measured(obs.config)
        usual = statistics.median(self._rates) if self._rates else None
        if not _off(obs.speed, past) and not _off(obs.link_rate, usual):
            return
        lasted = self.lasted_s - obs.steps * obs.step_time_s
        self._memory.leave(dataclasses.replace(
            self.guard.kept(), history=self._history, lasted_s=lasted,
            total_s=self.before_s + lasted, rates=tuple(self._rates)))
        self._enter(Conditions())
        self._since_s = self.trained_s - obs.steps * obs.step_time_s  # this window's are new
        self._changed, self._settling = True, True
        self.guard.forget_try(changed=True)  # a try across the change cannot be judged
        self.trigger.reset()
        self._call("reset")
        self.log.write("event", {"event": "conditions_changed", "config": obs.config,
                                 "speed": obs.speed, "measured_before": past,
                                 "reason": "measurements cleared"})

    def _recall(self, obs: Observation) -> None:
        """After a change: when ``obs``'s link rate and speed match what was measured under
        conditions the job left, they are back: their measurements are restored, and the
        guard goes to the fastest of them at its next decision (``Guard._go_back``)."""
        back = self._memory.recall(knobs(obs.config), obs.speed, obs.link_rate)
        if back is None:
            return
        self._enter(back)
        self.guard.returning = True
        self.log.write("event", {"event": "conditions_recalled", "config": obs.config,
                                 "speed": obs.speed, "reason": f"conditions seen before "
                                 f"({len(back.history)} configurations measured, held "
                                 f"{back.lasted_s:.1f} s last time, {back.total_s:.1f} s in "
                                 "all): their measurements restored"})

    def _enter(self, conditions: Conditions) -> None:
        """Make ``conditions``' state the loop's (an empty set: conditions new to the job)."""
        c = conditions
        self._history = c.history
        self.guard.enter(c)
        self.expect_s, self.before_s = c.lasted_s, c.total_s
        self._rates.clear()
        self._rates.extend(c.rates)

    @property
    def native(self) -> Config:
        return self.current.replace(scheduling=False)

    def _decide(self, obs: Observation, verdict: Verdict) -> Decision | None:
        if verdict.action == "stay" or knobs(verdict.config) == knobs(self.current):
            return None
        start = obs.last_step + 1 + self.lead(obs.step_time_s)
        step = -(-start // self.window_steps) * self.window_steps
        if 0 < self._end_step <= step:
            return None  # the job ends before the step it would apply at
        new = self.current.replace(partition_bytes=verdict.config.partition_bytes,
                                   credit_bytes=verdict.config.credit_bytes,
                                   scheduling=verdict.config.scheduling)
        decision = Decision(id=self._next_id, step=step, config=new, session=self.session,
                            reason=f"{verdict.action}: {verdict.reason}", window=obs.window)
        self._next_id += 1
        self.pending = self.latest = decision
        return decision

    def lead(self, step_time_s: float) -> int:
        """Steps from the end of a window to the earliest step a decision on it may name."""
        extra = math.ceil(self.lead_s / step_time_s) if step_time_s > 0 else 0
        return self.lead_steps + extra

    def _predict_current(self, obs: Observation) -> float | None:
        predicted = self.predictions([self.current])
        if predicted is not None:
            return predicted[0]
        return self.measured(self.current)

    def _candidates(self, obs: Observation) -> list[Candidate]:
        if self.tuner is None:
            return []
        out: list[Candidate] = []
        model = callable(getattr(self.tuner, "predict", None))
        proposal = self._call("propose") if model or self.trigger.exploring() else None
        if isinstance(proposal, Config):
            predicted = self.predictions([proposal])
            if predicted is not None:
                out.append(Candidate(proposal, predicted[0], "tuner"))
            else:
                past = self.measured(proposal)
                out.append(Candidate(proposal, past, "tuner", measured=past is not None))
        out += self._ranked(exclude={knobs(c.config) for c in out})
        best = max(((k, statistics.fmean(v)) for k, v in self._history.items() if v),
                   key=lambda kv: kv[1], default=None)
        if best is not None and best[0] not in {knobs(self.current)} | {knobs(c.config)
                                                                          for c in out}:
            out.append(Candidate(self._configs[best[0]], best[1], "history", measured=True))
        return out

    def _ranked(self, exclude: set[_Knobs]) -> list[Candidate]:
        """A model-based tuner's best other candidates (scored in one batched ``predict``), so
        the trigger and the log see the alternatives, not only the proposal."""
        pool = self.pool()
        if not pool:
            return []
        predicted = self.predictions(pool)
        if predicted is None:
            return []
        ranked = sorted(zip(pool, predicted, strict=True), key=lambda cp: -cp[1])
        return [Candidate(c, p, "model") for c, p in ranked
                if knobs(c) not in exclude | {knobs(self.current)}][:self.top_candidates]

    def pool(self) -> list[Config]:
        """The configurations a model-based tuner can score (its ``candidates``), or none."""
        pool = getattr(self.tuner, "candidates", None)
        if callable(pool):
            pool = self._call("candidates")
        if not isinstance(pool, Sequence) or not all(isinstance(c, Config) for c in pool):
            return []
        return list(pool)

    def predictions(self, configs: Sequence[Config]) -> list[float] | None:
        if self.tuner is None or not callable(getattr(self.tuner, "predict", None)):
            return None
        result = self._call("predict", list(configs))
        try:
            values = [float(v) for v in result]
        except (TypeError, ValueError):
            return None
        return values if len(values) == len(configs) else None

    def _remember(self, obs: Observation) -> None:
        """Keep ``obs``'s speed as a measurement of its configuration; not the job's first
        window, in which everything warms up beyond the steps it marks as warm-up (MXNet
        MobileNetV2: 100 samples/s there, 150-167 after, so the start looked slower than
        native)."""
        if self._settling:
            return
        if obs.link_rate:
            self._rates.append(obs.link_rate)
        key = knobs(obs.config)
        self._configs[key] = obs.config
        if not obs.config.scheduling:
            self.native_s = self.trained_s
        if obs.window == self._first_window:
            return
        fresh = self.guard.recheck_fresh and not obs.config.scheduling
        if fresh:
            self.guard.recheck_fresh = False
        if key not in self._history or fresh:
            self._history[key] = collections.deque(maxlen=self._history_len)
        self._history[key].append(obs.speed)

    def _adapt(self) -> None:
        """Predictions drifted. The model adapts; the job's measurements stay unless the
        configuration in force also ran ``DRIFT`` off what the job measured it at (a model
        far off on an unseen job drifts every few windows while the conditions hold, and a
        job that forgets its measurements tries its neighbours again). When they go, the
        guard's references stay: native's (a new measurement costs two switches) and where a
        try under way began (it is judged against it), until the speed in force says the
        conditions changed (``_check_conditions``)."""
        if self._drifted():
            keep = {knobs(self.native)}
            if self.guard.explored_from is not None:
                keep.add(knobs(self.guard.explored_from))
            self._history = {k: v for k, v in self._history.items() if k in keep}
            if self._recent and self.current.scheduling:
                self._remember(self._recent[-1])  # the window just measured is not stale
            what = "measurements cleared but native's, this window's and a try's origin"
        else:
            what = "measurements kept: the configuration in force runs as measured"
        self.trigger.reset()
        if callable(getattr(self.tuner, "adapt", None)):
            self._call("adapt", list(self._recent))
        elif callable(getattr(self.tuner, "reset", None)):
            self._call("reset")
        self.log.write("event", {"event": "adapt", "reason": "prediction error above "
                                 f"adapt_threshold; {what}"})

    def _drifted(self) -> bool:
        """Whether the window just measured ran ``DRIFT`` off the job's earlier windows of the
        same configuration (without earlier windows nothing says the conditions moved)."""
        speeds = self._history.get(knobs(self.current))
        if not self._recent or not speeds or len(speeds) < 2:
            return False
        past = statistics.fmean(list(speeds)[:-1])
        return past > 0 and abs(self._recent[-1].speed / past - 1.0) > DRIFT

    def _call(self, name: str, *args: Any) -> Any:
        """Call a tuner hook; a failing tuner must never stop training, so log and go on."""
        method = getattr(self.tuner, name, None)
        if method is None:
            return None
        try:
            return method(*args)
        except Exception as exc:
            self._tuner_failures[name] += 1
            if self._tuner_failures[name] <= 3:
                log.exception("tuner.%s failed; keeping the configuration in force", name)
            self.log.write("event", {"event": "tuner_error", "hook": name, "error": repr(exc)})
            return None
