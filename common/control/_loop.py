"""The coordinator's decision loop, free of sockets: observation in, decision (or none) out.

Per merged window it tells the tuner what the configuration in force achieved, asks for a
proposal with predictions, lets the trigger decide and logs it all; a switch becomes a
Decision at a window boundary far enough ahead that every worker hears of it first. It
measures what switches cost this job, so the trigger makes none that cannot pay back, and
guards against doing worse than nothing: native is measured early and again when conditions
change, and no configuration measured slower than native keeps the job for more than
``guard_windows`` windows. Why each rule is as it is: docs/tuning-loop.md.

Tuners need only ``propose()`` and ``observe(config, speed)``; ``observe_window``,
``predict``, ``candidates``, ``adapt`` and ``reset`` are used when present.
"""

from __future__ import annotations

import collections
import logging
import math
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from common.config import Config
from common.control._conditions import RATES, Conditions, Memory
from common.control._decision import Decision
from common.decision_log import DecisionLog
from common.errors import ConfigError
from common.stats import Observation
from common.trigger import Candidate, Trigger, Verdict, knobs

__all__ = ["TunerLike", "TuningLoop"]

log = logging.getLogger(__name__)

_Knobs = tuple[int, int, bool]
CHANGED = 3.0  # a speed this many times off its own measurement: conditions changed
PROBE_GAIN_CAP = 0.5  # the most of a model's predicted gain a probe's cost is weighed against
PROBE_TRUST = 0.5  # the share of that gain counted: on unseen models most picks measure slower
MAX_MISSES = 2  # scheduled configurations found slower than native before the model is not
#                 followed to unmeasured ones (until conditions change)
DRIFT = 0.15  # a window this far off its configuration's measurement: the conditions moved
LATE_WINDOWS = 2  # windows a decision may come into force after its step before it is dropped
RECHECK_GAIN = 0.15  # a gain on native below this may be a phase of the machine: checked again
RECHECK_S = 10.0  # after this much training time on the scheduled configuration
RECHECK_WINDOWS = 10  # (at least this many windows), doubling each time native is still slower
MISS_SLOWDOWN = 0.25  # what a try is assumed to lose until the guard leaves it: of 52 tries
#                      from native in the native sweep's jobs, 33 measured slower, by 23% on
#                      average (at most 53%)


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
        self._expect_s = 0.0  # how long the conditions in force held the last time (recalled)
        self._before_s = 0.0  # and in all before this time
        self._rates: collections.deque[float] = collections.deque(maxlen=RATES)  # the link's
        self._returning = False  # recalled conditions: go to their best measured at once
        self._settling = False  # the window that showed a change: neither measured nor decided
        if not 0.0 <= noise_band < 1.0 or guard_windows < 1:
            raise ConfigError(f"noise_band must be in [0, 1) and guard_windows >= 1, got "
                              f"noise_band={noise_band!r}, guard_windows={guard_windows!r}")
        self.guard = guard and tuner is not None
        self.noise_band = noise_band
        self.guard_windows = guard_windows
        self.veto_windows = veto_windows
        self.guard_budget = guard_budget
        if explore_share is not None and not 0.0 <= explore_share < 1.0:
            raise ConfigError(f"explore_share must be in [0, 1) or None (no budget), got "
                              f"explore_share={explore_share!r}")
        self.explore_share = explore_share
        self.lost_s = 0.0  # time this job lost against native: switches, slower windows
        self._window_s = 0.0  # the last window's steady-state time
        self._step_s = 0.0  # and its steps'
        self._last_step = 0  # the last window's last step
        self._end_step = 0  # the step the job ends at, when a worker knows it (0: unknown)
        self._first_cost: float | None = None  # the first window's warm-up (a first trace)
        self._first_window: int | None = None
        self._configs: dict[_Knobs, Config] = {}
        self._slow_windows = 0
        self._windows = 0
        self._vetoed: dict[_Knobs, int] = {}  # configuration -> window the guard left it
        self._explored_from: Config | None = None  # where the guard's last exploration began
        self._probed = False  # the guard measured the model's pick against native already
        self._climbed: set[_Knobs] = set()  # climbed to or from under the conditions in force
        self._climb_s = 0.0  # what the climbs under the conditions in force were priced at
        self._misses = 0  # scheduled configurations the guard left for native, this conditions
        self._tried_ratio: float | None = None  # the model's pick over native, as it ranked it
        self._overrated = 1.0  # measured over ranked ratio of this conditions' worst miss
        self._native_s: float | None = None  # trained_s at native's last window
        self._recheck_every: float | None = None  # None: not grown since conditions changed
        self._recheck_fresh = False  # native's next window starts its measurement afresh

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
        self._window_s, self._step_s = obs.steps * obs.step_time_s, obs.step_time_s
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
                self._explored_from = None  # a try that never ran is not judged
                self._recheck_fresh = False
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
        if self._decided_at is not None and \
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
        guarded = self._guard(verdict, candidates, predicted_current) if self.guard else None
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

    def measured(self, config: Config) -> float | None:
        """Mean observed speed of ``config`` in this job (recent windows), None if never run."""
        speeds = self._history.get(knobs(config))
        return statistics.fmean(speeds) if speeds else None

    @property
    def horizon_s(self) -> float:
        """How long a switch's gain is expected to last: to the job's end (``left_s``) while
        its conditions have held since it started; once they have changed, or when no worker
        knows where the job ends, as long again as the conditions in force have lasted (a
        link that alternates every few seconds pays for no retrace), or as long as they held
        the last time when they came back and that is longer, never past the end."""
        if self._changed or math.isinf(self.left_s):
            return min(max(self.lasted_s, self._expect_s), self.left_s)
        return self.left_s

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
        steps = self._end_step - self._last_step - self._lead(self._step_s)
        return max(0, steps) * self._step_s

    @property
    def _follows_model(self) -> bool:
        """The tuner predicts (a model): its tries are the guard's to price. Search tuners
        explore by design."""
        return callable(getattr(self.tuner, "predict", None))

    def _too_late(self, cost_s: float) -> bool:
        """The job ends before a try costing ``cost_s`` pays it back at the least gain the
        guard keeps (``noise_band``): near a known end, the model's picks are not tried (the
        guard still measures native, which only protects)."""
        return cost_s > self.noise_band * self.left_s

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
                ratio = max(1.0, ratio - self.noise_band)
            self.lost_s += obs.steps * obs.step_time_s * (1.0 - ratio)

    def _unaffordable(self, windows: int | None = None) -> str:
        """Why following the model to an unmeasured configuration does not fit the exploration
        budget ('' if it does), once native is measured: what the job lost against it, plus
        what a miss would cost (a switch to a configuration new to the job and one back, and a
        quarter of the time on the configuration: the windows until the guard leaves it, one
        for a probe or trial from native and ``guard_windows`` otherwise, then the decision's
        lead, rounded up to windows), must stay within ``explore_share`` of the time trained. A
        model far off on a fast job then costs a bounded share of it whenever the job stops;
        measured gains earn room for more tries. Before native is measured (a job's first
        window is not counted) nothing is tried: a model with no layer times yet cannot score,
        and the trigger would explore its fallback's proposal. Search tuners (no ``predict``)
        explore by design: the budget is the model's."""
        if self.explore_share is None or not self._follows_model:
            return ""
        if self.measured(self.native) is None:
            return "native is not measured yet (every try is measured against it)"
        miss = self._miss_s(self.guard_windows if windows is None else windows)
        allowed = self.explore_share * self.trained_s
        if self.lost_s + miss <= allowed:
            return ""
        return (f"a miss would cost about {miss:.2f} s and this job has lost {self.lost_s:.2f} s "
                f"to native, above {self.explore_share:.0%} of the {self.trained_s:.1f} s "
                "trained")

    def _miss_s(self, windows: int) -> float:
        """What a try left after ``windows`` windows is expected to cost (``_unaffordable``)."""
        on_s = (windows + math.ceil(self._lead(self._step_s) / self.window_steps)) * self._window_s
        there = statistics.fmean(self._new_costs) if self._new_costs else self._first_cost or 0.0
        back = statistics.fmean(self._back_costs) if self._back_costs else 0.0
        return there + back + on_s * MISS_SLOWDOWN

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
        usual = statistics.median(self._rates) if len(self._rates) >= 2 else None
        if not _off(obs.speed, past) and not _off(obs.link_rate, usual):
            return
        lasted = self.lasted_s - obs.steps * obs.step_time_s
        self._memory.leave(Conditions(
            history=self._history, vetoed=self._vetoed, probed=self._probed,
            climbed=self._climbed, climb_s=self._climb_s, misses=self._misses,
            overrated=self._overrated, lasted_s=lasted, total_s=self._before_s + lasted,
            rates=tuple(self._rates)))
        self._enter(Conditions())
        self._since_s = self.trained_s - obs.steps * obs.step_time_s  # this window's are new
        self._changed, self._settling = True, True
        self._explored_from = None  # a try across the change cannot be judged
        self._recheck_every = None
        self._recheck_fresh = False
        self.trigger.reset()
        self._call("reset")
        self.log.write("event", {"event": "conditions_changed", "config": obs.config,
                                 "speed": obs.speed, "measured_before": past,
                                 "reason": "measurements cleared"})

    def _recall(self, obs: Observation) -> None:
        """After a change: when ``obs``'s link rate and speed match what was measured under
        conditions the job left, they are back: their measurements are restored, and the
        guard goes to the fastest of them at its next decision (``_go_back``)."""
        back = self._memory.recall(knobs(obs.config), obs.speed, obs.link_rate)
        if back is None:
            return
        self._enter(back)
        self._returning = True
        self.log.write("event", {"event": "conditions_recalled", "config": obs.config,
                                 "speed": obs.speed, "reason": f"conditions seen before "
                                 f"({len(back.history)} configurations measured, held "
                                 f"{back.lasted_s:.1f} s last time, {back.total_s:.1f} s in "
                                 "all): their measurements restored"})

    def _enter(self, conditions: Conditions) -> None:
        """Make ``conditions``' state the loop's (an empty set: conditions new to the job)."""
        c = conditions
        self._history, self._vetoed, self._climbed = c.history, c.vetoed, c.climbed
        self._probed, self._climb_s, self._misses, self._overrated = \
            c.probed, c.climb_s, c.misses, c.overrated
        self._expect_s, self._before_s = c.lasted_s, c.total_s
        self._rates.clear()
        self._rates.extend(c.rates)

    @property
    def native(self) -> Config:
        return self.current.replace(scheduling=False)

    def _guard(self, verdict: Verdict, candidates: Sequence[Candidate] = (),
               predicted_current: float | None = None) -> Verdict | None:
        """Native first, and never worse than native (docs/tuning-loop.md); None keeps
        the trigger's verdict."""
        self._windows += 1
        native = self.measured(self.native)
        if self._returning:
            self._returning = False
            best = self._go_back(native)
            if best is not None:
                return Verdict("switch", best, f"guard: conditions seen before; "
                               f"{best.describe()} measured fastest under them: back to it",
                               verdict.gain, verdict.error, verdict.adapt)
        left = self._explored_from
        cheap = self.switch_cost_s <= self.guard_budget * self.trained_s
        if not self.current.scheduling:
            self._slow_windows = 0
            self._explored_from = None
            back = self.measured(left) if left is not None else None
            if left is not None and native is not None and back is not None:
                if native * (1 + self.noise_band) < back <= native * (1 + 2 * self.noise_band) \
                        and len(self._history[knobs(self.native)]) < 2:
                    self._explored_from = left
                    return Verdict("stay", self.current, f"guard: native measured "
                                   f"{native:.1f} samples/s in one window, within twice the "
                                   f"noise band below the {back:.1f} of {left.describe()}: "
                                   "one more window before deciding", verdict.gain,
                                   verdict.error, verdict.adapt)
                if back > native * (1 + self.noise_band):
                    self._recheck_every = 2 * self._recheck_interval()
                    return Verdict("switch", left, f"guard: native measured {native:.1f} "
                                   f"samples/s, below the {back:.1f} of {left.describe()}: back "
                                   "to it", verdict.gain, verdict.error, verdict.adapt)
                self.log.write("event", {"event": "guard", "reason": f"guard: native measured "
                                         f"{native:.1f} samples/s, {left.describe()} "
                                         f"{back:.1f}: not faster beyond the noise band, so "
                                         "native stays"})
            probe = self._probe(candidates, predicted_current) if native is not None else None
            ratio = 0.0 if probe is None else \
                (probe.predicted or 0.0) / (predicted_current or 1.0) - 1.0
            if probe is not None and self._pays_as_probe(ratio):
                self._probed = True
                self._explored_from = self.current
                self._tried_ratio = 1.0 + ratio
                return Verdict("explore", probe.config, f"guard: the model ranks "
                               f"{probe.config.describe()} {ratio:+.1%} above its own "
                               f"prediction of native ({native:.1f} samples/s measured): "
                               "measure it for one window", verdict.gain, verdict.error,
                               verdict.adapt)
            trial = self._trial(candidates, predicted_current) \
                if native is not None and probe is None else None
            if trial is not None:
                self._explored_from = self.current
                self._tried_ratio = (trial.predicted or 0.0) / predicted_current \
                    if predicted_current else None
                return Verdict("explore", trial.config, f"guard: measure the model's best "
                               f"scheduled pick, {trial.config.describe()}, for one window "
                               f"(predicted {trial.predicted or 0.0:.1f} samples/s; within the "
                               f"{self.explore_share:.0%} exploration budget)", verdict.gain,
                               verdict.error, verdict.adapt)
        elif left is not None and not left.scheduling:
            self._explored_from = None  # a probe from native: measured once, kept if faster
            here = self.measured(self.current)
            if native is not None and here is not None and \
                    here <= native * (1 + self.noise_band):
                self._vetoed[knobs(self.current)] = self._windows
                self._misses += 1
                if self._tried_ratio:
                    self._overrated = min(self._overrated, here / native / self._tried_ratio)
                return Verdict("switch", left, f"guard: {here:.1f} samples/s measured on "
                               f"{self.current.describe()}, not above native's {native:.1f} "
                               "beyond the noise band: back to native", verdict.gain,
                               verdict.error, verdict.adapt)
        elif left is not None and knobs(self.current) in self._climbed:
            self._explored_from = None  # a climb from a scheduled one: kept if faster
            here, there = self.measured(self.current), self.measured(left)
            if here is not None and there is not None and here <= there * (1 + self.noise_band):
                self._vetoed[knobs(self.current)] = self._windows
                return Verdict("switch", left, f"guard: {here:.1f} samples/s measured on "
                               f"{self.current.describe()}, not above the {there:.1f} of "
                               f"{left.describe()} beyond the noise band: back to it",
                               verdict.gain, verdict.error, verdict.adapt)
        elif native is None and (cheap or (gain := self._native_gain(predicted_current))):
            self._explored_from = self.current
            why = "" if cheap else f" (the model ranks it {gain:+.0%} above the configuration " \
                "in force, which pays for the switch over the job's horizon)"
            return Verdict("explore", self.native, "guard: measure the framework's own path "
                           f"(native) for one window{why}", verdict.gain, verdict.error,
                           verdict.adapt)
        elif left is None and native is not None and (since := self._recheck_due()):
            self._explored_from = self.current
            self._recheck_fresh = True  # judged on the windows to come
            return Verdict("explore", self.native, f"guard: native last measured {since:.0f} s "
                           f"of training ago; measure it again for one window, beside "
                           f"{self.current.describe()}'s latest", verdict.gain, verdict.error,
                           verdict.adapt)
        barred = None
        if verdict.action != "stay":
            why = self._barred(verdict.config, native) if verdict.config.scheduling else ""
            there, here = self.measured(verdict.config), self.measured(self.current)
            if not why and there is not None and here is not None and \
                    there <= here * (1.0 + self.noise_band):
                why = (f"measured {there:.1f} samples/s, not above the {here:.1f} in force "
                       "beyond the noise band")
            if not why and verdict.action == "switch" and there is None and \
                    verdict.gain is not None and \
                    self._overrates(1.0 + verdict.gain):
                why = (f"the model's {verdict.gain:+.1%}, discounted by how far it overrated "
                       f"a pick that missed here ({self._overrated:.2f} of its ranking "
                       "measured), is no gain")
            if why:
                barred = verdict = Verdict("stay", self.current, f"guard: not switching to "
                                           f"{verdict.config.describe()}, {why}", verdict.gain,
                                           verdict.error, verdict.adapt)
            elif verdict.action == "switch" and there is None and here is not None and \
                    self.current.scheduling and verdict.config.scheduling:
                self._climbed.update((knobs(verdict.config), knobs(self.current)))
                self._explored_from = self.current  # judged as a climb: kept if faster
        current = self.measured(self.current)
        if native is not None and current is not None and self.current.scheduling and \
                current < native * (1.0 - self.noise_band):
            self._slow_windows += 1
        else:
            self._slow_windows = 0
        if verdict.action == "stay" and self._slow_windows >= self.guard_windows:
            assert current is not None and native is not None
            self._slow_windows = 0
            self._vetoed[knobs(self.current)] = self._windows
            self._misses += 1
            refuge, speed = self._best_measured(native)
            where = f"{refuge.describe()} ({speed:.1f})" if refuge.scheduling else "native"
            return Verdict("switch", refuge, f"guard: {current:.1f} samples/s measured on "
                           f"{self.current.describe()}, {1 - current / native:.1%} below "
                           f"native's {native:.1f}: to {where}", verdict.gain, verdict.error,
                           verdict.adapt)
        climb = self._climb(native) if verdict.action == "stay" and \
            self._explored_from is None else None
        if climb is not None:
            assert current is not None and native is not None
            self._climb_s += self._miss_s(1)
            self._climbed.update((knobs(climb), knobs(self.current)))  # adapting forgets
            self._explored_from = self.current
            return Verdict("explore", climb, f"guard: {self.current.describe()} runs "
                           f"{current / native:.2f}x native; measure its neighbour "
                           f"{climb.describe()} for one window (the climbs so far and this one "
                           f"within {self.explore_share:.0%} of the time trained)", verdict.gain,
                           verdict.error, verdict.adapt)
        return barred

    def _go_back(self, native: float | None) -> Config | None:
        """Under conditions seen before: the fastest configuration measured under them, when
        faster than the one in force beyond ``noise_band`` (native as ``_best_measured``
        decides it) and what it saves, if they hold as long as the last time, pays for the
        switch; or None."""
        here = self.measured(self.current)
        if native is None or here is None:
            return None
        best, speed = self._best_measured(native)
        if knobs(best) == knobs(self.current) or speed <= here * (1 + self.noise_band):
            return None
        saved = max(self._expect_s, self.lasted_s) * (1.0 - here / speed)
        return best if saved > self.switch_cost_s else None

    def _recheck_interval(self) -> float:
        return self._recheck_every or max(RECHECK_S, RECHECK_WINDOWS * self._window_s)

    def _recheck_due(self) -> float:
        """Training time since native's last window when it is due to be measured again (0 if
        not): on a scheduled configuration measured less than ``RECHECK_GAIN`` faster than
        native, once ``_recheck_interval`` has passed and the two switches to configurations
        run before fit ``guard_budget`` of it. Speeds on a busy machine drift by up to a tenth
        in phases lasting seconds, so such a gain, measured against native's windows of
        another phase, may not be there; measured next to each other, the two compare, and each
        check that keeps the configuration doubles the wait for the next."""
        here, native = self.measured(self.current), self.measured(self.native)
        if not self.current.scheduling or self._native_s is None or here is None or \
                native is None or here >= native * (1 + RECHECK_GAIN):
            return 0.0
        since = self.trained_s - self._native_s
        back = statistics.fmean(self._back_costs) if self._back_costs else self.switch_cost_s
        interval = self._recheck_interval()
        return since if since >= interval and 2 * back <= self.guard_budget * interval else 0.0

    def _best_measured(self, native: float) -> tuple[Config, float]:
        """Where a job leaving a slow configuration goes: the fastest one measured under the
        conditions in force, if faster than native beyond the noise band and not barred (a
        trigger that left a good configuration for a worse one goes back), else native."""
        best = max(((c, speed) for k, c in self._configs.items() if c.scheduling
                    and k not in self._vetoed and (speed := self.measured(c)) is not None),
                   key=lambda cs: cs[1], default=None)
        if best is not None and best[1] > native * (1 + self.noise_band):
            return self.current.replace(partition_bytes=best[0].partition_bytes,
                                        credit_bytes=best[0].credit_bytes,
                                        scheduling=True), best[1]
        return self.native, native

    def _climb(self, native: float | None) -> Config | None:
        """On a scheduled configuration measured faster than native: the neighbour the model
        ranks first (the partition halved or doubled, with the credit kept or scaled with it,
        or the credit halved or doubled), neither measured nor tried under these conditions
        nor barred, once what a miss costs, added to what the climbs under these conditions
        were priced at, fits ``explore_share`` of the time trained under them. The gain the
        job measured does not fund climbs: a neighbour of a configuration already faster
        than native rarely gains much more (1 of 6 climbs kept in a 15-minute MXNet job, 4%
        faster), while a TensorFlow climb pays a first trace (five climbs in a 40 s mlp job
        at 1gbit spent most of its 1.35x). A model that ranks the
        space well leads the climb; one that does not (flat after adapting on an unseen job)
        still has its neighbourhood measured, and each step is kept only if it measures
        faster than where it began, so the job climbs on measurements to a local best."""
        here = self.measured(self.current)
        if self.explore_share is None or native is None or here is None or \
                not self.current.scheduling or here <= native * (1 + self.noise_band):
            return None
        pool = self._pool()
        p, c = self.current.partition_bytes, self.current.credit_bytes
        steps = {(p * 2, c), (p // 2, c), (p * 2, c * 2), (p // 2, c // 2), (p, c * 2),
                 (p, c // 2)}
        near = [x for x in pool if x.scheduling and (x.partition_bytes, x.credit_bytes) in steps
                and knobs(x) not in self._climbed and knobs(x) not in self._vetoed
                and self.measured(x) is None]
        if not near or self._climb_s + self._miss_s(1) > self.explore_share * self.lasted_s \
                or self._too_late(self._miss_s(1)):
            return None
        predicted = self._predictions(near)
        if predicted is None:
            return None
        return max(zip(near, predicted, strict=True), key=lambda xp: xp[1])[0]

    def _native_gain(self, predicted_current: float | None) -> float:
        """On a scheduled configuration before native is measured: the model's prediction of
        native over its own of the configuration in force, less one, when that gain, counted
        as a probe's (``PROBE_TRUST``, at most ``PROBE_GAIN_CAP``), pays over the horizon for a
        miss; else 0. A job started on a poor configuration then leaves it at its first
        decision, not once the switch is cheap for the job (20 times the cost trained)."""
        if not predicted_current or predicted_current <= 0:
            return 0.0
        predicted = self._predictions([self.native])
        if predicted is None:
            return 0.0
        gain = predicted[0] / predicted_current - 1.0
        return gain if gain > 0 and self._pays_as_probe(gain) else 0.0

    def _pays_as_probe(self, gain: float) -> bool:
        """A model's ranked ``gain`` pays for a one-window try: ``PROBE_TRUST`` of it (at most
        ``PROBE_GAIN_CAP``) over the horizon covers a miss. Under conditions seen before the
        horizon counts every time they held: what a try measures comes back with them."""
        horizon = self.horizon_s if not self._before_s else \
            min(self.lasted_s + self._before_s, self.left_s)
        return self._miss_s(1) <= PROBE_TRUST * min(gain, PROBE_GAIN_CAP) * horizon

    def _probe(self, candidates: Sequence[Candidate],
               predicted_current: float | None) -> Candidate | None:
        """On native: the scheduled configuration the model ranks above native by more than
        the trigger's gain threshold, compared with its own prediction of native (a model far
        off on an unseen job still ranks; its absolute speeds mislead the trigger), not
        measured yet nor barred. Once per conditions, so a wrong ranking costs one window."""
        if self._probed or not predicted_current or predicted_current <= 0:
            return None
        threshold = getattr(self.trigger, "gain_threshold", 0.05)
        best = self._best_untried(candidates, budget=False)
        if best is None or (best.predicted or 0.0) <= predicted_current * (1.0 + threshold):
            return None
        return best

    def _trial(self, candidates: Sequence[Candidate],
               predicted_native: float | None) -> Candidate | None:
        """On native, when no probe is due: the model's best scheduled pick not measured yet,
        once a miss fits the exploration budget. A model far off on an unseen job may rank
        native first where scheduling gains (MXNet's mlp at 1gbit: 1.27x at 256KiB:1MiB); the
        budget bounds what a wrong pick costs. After a miss under these conditions, the model's
        ranking of a pick over native is discounted by how far it overrated the miss, and
        only a pick still above native is tried: a model that ranked 64KiB blocks +20% over
        native where they ran 0.55x (TF's cnn at 3gbit) would otherwise spend a second try on
        their neighbour. No budget (``explore_share`` None): no trials."""
        if self.explore_share is None:
            return None
        best = self._best_untried(candidates)
        if best is not None and self._overrates(
                (best.predicted or 0.0) / predicted_native if predicted_native else 0.0):
            return None
        return best

    def _overrates(self, ratio: float) -> bool:
        """After a miss under these conditions: a model's ranking of ``ratio`` over the
        configuration in force, discounted by how far it overrated that miss, is no gain."""
        return bool(self._misses) and ratio * self._overrated <= 1.0

    def _best_untried(self, candidates: Sequence[Candidate], *,
                      budget: bool = True) -> Candidate | None:
        """The model's best scheduled candidate this job has neither measured nor left under
        the conditions in force, if a try from native (left after one window) may go there;
        ``budget=False``: whether a miss fits the exploration budget is left to the caller."""
        ranked = [c for c in candidates if c.predicted is not None and c.config.scheduling
                  and self.measured(c.config) is None and knobs(c.config) not in self._vetoed
                  and not self._barred(c.config, None, windows=1, budget=budget)]
        return max(ranked, key=lambda c: c.predicted or 0.0, default=None)

    def _barred(self, config: Config, native: float | None, *,
                windows: int | None = None, budget: bool = True) -> str:
        """Why the guard will not switch to ``config`` ('' if it may)."""
        measured = self.measured(config)
        if measured is None and budget and (short := self._unaffordable(windows)):
            return short
        miss = self._miss_s(self.guard_windows if windows is None else windows)
        if measured is None and budget and self._follows_model and self._too_late(miss):
            return (f"the job ends in about {self.left_s:.1f} s, too soon to pay back a miss "
                    f"of {miss:.2f} s")
        if self._misses >= MAX_MISSES and measured is None:
            return (f"the model's picks measured slower than native {self._misses} times under "
                    "these conditions: only measured configurations until they change")
        left = self._vetoed.get(knobs(config))
        if left is not None and self._windows - left <= self.veto_windows:
            return (f"the guard left it {self._windows - left} window(s) ago, measured no "
                    "faster than what it was tried against")
        if native is not None and measured is not None and \
                measured < native * (1.0 - self.noise_band):
            return f"measured {measured:.1f} samples/s, below native's {native:.1f}"
        return ""

    def _decide(self, obs: Observation, verdict: Verdict) -> Decision | None:
        if verdict.action == "stay" or knobs(verdict.config) == knobs(self.current):
            return None
        start = obs.last_step + 1 + self._lead(obs.step_time_s)
        step = -(-start // self.window_steps) * self.window_steps
        new = self.current.replace(partition_bytes=verdict.config.partition_bytes,
                                   credit_bytes=verdict.config.credit_bytes,
                                   scheduling=verdict.config.scheduling)
        decision = Decision(id=self._next_id, step=step, config=new, session=self.session,
                            reason=f"{verdict.action}: {verdict.reason}", window=obs.window)
        self._next_id += 1
        self.pending = self.latest = decision
        return decision

    def _lead(self, step_time_s: float) -> int:
        """Steps from the end of a window to the earliest step a decision on it may name."""
        extra = math.ceil(self.lead_s / step_time_s) if step_time_s > 0 else 0
        return self.lead_steps + extra

    def _predict_current(self, obs: Observation) -> float | None:
        predicted = self._predictions([self.current])
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
            predicted = self._predictions([proposal])
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
        pool = self._pool()
        if not pool:
            return []
        predicted = self._predictions(pool)
        if predicted is None:
            return []
        ranked = sorted(zip(pool, predicted, strict=True), key=lambda cp: -cp[1])
        return [Candidate(c, p, "model") for c, p in ranked
                if knobs(c) not in exclude | {knobs(self.current)}][:self.top_candidates]

    def _pool(self) -> list[Config]:
        """The configurations a model-based tuner can score (its ``candidates``), or none."""
        pool = getattr(self.tuner, "candidates", None)
        if callable(pool):
            pool = self._call("candidates")
        if not isinstance(pool, Sequence) or not all(isinstance(c, Config) for c in pool):
            return []
        return list(pool)

    def _predictions(self, configs: Sequence[Config]) -> list[float] | None:
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
            self._native_s = self.trained_s
        if obs.window == self._first_window:
            return
        fresh = self._recheck_fresh and not obs.config.scheduling
        if fresh:
            self._recheck_fresh = False
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
            if self._explored_from is not None:
                keep.add(knobs(self._explored_from))
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
