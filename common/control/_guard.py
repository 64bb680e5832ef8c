"""The guard: never worse than the framework's own path.

Native is measured early and again when conditions change; a configuration measured slower
than native beyond ``noise_band`` keeps the job for at most ``guard_windows`` windows; the
model's picks are tried from native only while what a miss costs fits ``explore_share`` of the
time trained, and kept only when measured faster. It reviews each verdict of the trigger and
reads the loop's measurements (``TuningLoop``); why each rule is as it is:
docs/tuning-loop.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from common.config import Config
from common.control._conditions import Conditions
from common.errors import ConfigError
from common.trigger import Candidate, Verdict, knobs

if TYPE_CHECKING:
    from common.control._loop import TuningLoop

__all__ = ["Guard"]

_Knobs = tuple[int, int, bool]
PROBE_GAIN_CAP = 0.5  # the most of a model's predicted gain a probe's cost is weighed against
PROBE_TRUST = 0.5  # the share of that gain counted: on unseen models most picks measure slower
MAX_MISSES = 2  # scheduled configurations found slower than native before the model is not
#                 followed to unmeasured ones (until conditions change)
RECHECK_GAIN = 0.15  # a gain on native below this may be a phase of the machine: checked again
#                     (a try from native is checked once whatever its gain: ``_confirm``)
RECHECK_S = 10.0  # after this much training time on the scheduled configuration
RECHECK_WINDOWS = 10  # (at least this many windows), doubling each time native is still slower
JUDGED_WINDOWS = 3  # a try kept on its first windows is judged again until it has this many,
#                   by their median: one window swings by 10-20% here (TensorFlow's cnn at
#                   3gbit kept a probe on one window 14% above native that ran 2% below after)
MISS_SLOWDOWN = 0.25  # what a try is assumed to lose until the guard leaves it: of 52 tries
#                      from native in the native sweep's jobs, 33 measured slower, by 23% on
#                      average (at most 53%)


class Guard:
    """The loop's guard (``enabled`` only with a tuner): ``review`` keeps or replaces the
    trigger's verdict; its state per conditions goes with the loop's measurements
    (``kept``, ``enter``)."""

    def __init__(self, loop: TuningLoop, *, enabled: bool = True, noise_band: float = 0.03,
                 guard_windows: int = 2, veto_windows: int = 30, guard_budget: float = 0.05,
                 explore_share: float | None = 0.02) -> None:
        if not 0.0 <= noise_band < 1.0 or guard_windows < 1:
            raise ConfigError(f"noise_band must be in [0, 1) and guard_windows >= 1, got "
                              f"noise_band={noise_band!r}, guard_windows={guard_windows!r}")
        if explore_share is not None and not 0.0 <= explore_share < 1.0:
            raise ConfigError(f"explore_share must be in [0, 1) or None (no budget), got "
                              f"explore_share={explore_share!r}")
        self.loop = loop
        self.enabled = enabled
        self.noise_band = noise_band
        self.guard_windows = guard_windows
        self.veto_windows = veto_windows
        self.guard_budget = guard_budget
        self.explore_share = explore_share
        self.returning = False  # recalled conditions: go to their best measured at once
        self.explored_from: Config | None = None  # where the guard's last exploration began
        self.recheck_fresh = False  # native's next window starts its measurement afresh
        self._recheck_every: float | None = None  # None: not grown since conditions changed
        self._slow_windows = 0
        self._windows = 0
        self._tried_ratio: float | None = None  # the model's pick over native, as it ranked it
        self._native_next = False  # a pick tried before native: native's window comes next
        self._confirm = False  # a try from native was kept: native is measured again beside it
        self.enter(Conditions())

    def kept(self) -> Conditions:
        """What the guard did under the conditions in force (the loop adds its measurements)."""
        return Conditions(vetoed=self.vetoed, probed=self.probed, climbed=self.climbed,
                          climb_s=self.climb_s, misses=self.misses, overrated=self.overrated)

    def enter(self, conditions: Conditions) -> None:
        """Make ``conditions``' record of tries the guard's (an empty set: new conditions)."""
        c = conditions
        self.vetoed: dict[_Knobs, int] = c.vetoed  # configuration -> window the guard left it
        self.probed = c.probed  # the guard measured the model's pick against native already
        self.climbed: set[_Knobs] = c.climbed  # climbed to or from under these conditions
        self.climb_s = c.climb_s  # what the climbs under these conditions were priced at
        self.misses = c.misses  # scheduled configurations left for native, these conditions
        self.overrated = c.overrated  # measured over ranked ratio of these conditions' worst miss

    def due(self, speed: float) -> bool:
        """The window just measured (``speed``, not yet in the loop's measurements) is to be
        decided on at once, not at the loop's pace: it is a try's ``JUDGED_WINDOWS``-th, or it
        ran a scheduled configuration slower than native, or one before it did. The rules count
        windows (a slow configuration is left after ``guard_windows``), and on a fast job a
        second of windows is many. A try's first windows wait for the pace: one window swings
        by 10-20% here, and a try is left at the first verdict that does not measure it faster."""
        loop = self.loop
        if not self.enabled:
            return False
        if self._slow_windows > 0 or (self.explored_from is not None and
                                      loop.runs(loop.current) + 1 >= JUDGED_WINDOWS):
            return True
        native = loop.measured(loop.native)
        return loop.current.scheduling and native is not None and \
            speed < native * (1.0 - self.noise_band)

    def forget_try(self, *, changed: bool = False) -> None:
        """A try that never ran, or ran across a change of conditions, is not judged;
        ``changed``: native's recheck interval starts again too."""
        self.explored_from = None
        self.recheck_fresh = False
        self._native_next = False
        self._confirm = False
        if changed:
            self._recheck_every = None

    def review(self, verdict: Verdict, candidates: Sequence[Candidate] = (),
               predicted_current: float | None = None) -> Verdict | None:
        """Native first, and never worse than native (docs/tuning-loop.md); None keeps
        the trigger's verdict."""
        loop = self.loop
        self._windows += 1
        native = loop.measured(loop.native)
        if self.returning:
            self.returning = False
            best = self._go_back(native)
            if best is not None:
                return Verdict("switch", best, f"guard: conditions seen before; "
                               f"{best.describe()} measured fastest under them: back to it",
                               verdict.gain, verdict.error, verdict.adapt)
        left = self.explored_from
        cheap = loop.switch_cost_s <= self.guard_budget * loop.trained_s
        if not loop.current.scheduling:
            self._slow_windows = 0
            self.explored_from = None
            back = loop.measured(left) if left is not None and left.scheduling else None
            if left is not None and native is not None and back is not None:
                if native * (1 + self.noise_band) < back <= native * (1 + 2 * self.noise_band) \
                        and loop.runs(loop.native) < 2:
                    self.explored_from = left
                    return Verdict("stay", loop.current, f"guard: native measured "
                                   f"{native:.1f} samples/s in one window, within twice the "
                                   f"noise band below the {back:.1f} of {left.describe()}: "
                                   "one more window before deciding", verdict.gain,
                                   verdict.error, verdict.adapt)
                if back > native * (1 + self.noise_band):
                    self._recheck_every = 2 * self._recheck_interval()
                    return Verdict("switch", left, f"guard: native measured {native:.1f} "
                                   f"samples/s, below the {back:.1f} of {left.describe()}: back "
                                   "to it", verdict.gain, verdict.error, verdict.adapt)
                loop.log.write("event", {"event": "guard", "reason": f"guard: native measured "
                                         f"{native:.1f} samples/s, {left.describe()} "
                                         f"{back:.1f}: not faster beyond the noise band, so "
                                         "native stays"})
            probe = self._probe(candidates, predicted_current) if native is not None else None
            ratio = 0.0 if probe is None else \
                (probe.predicted or 0.0) / (predicted_current or 1.0) - 1.0
            if probe is not None and self._pays_as_probe(ratio):
                self.probed = True
                self.explored_from = loop.current
                self._tried_ratio = 1.0 + ratio
                return Verdict("explore", probe.config, f"guard: the model ranks "
                               f"{probe.config.describe()} {ratio:+.1%} above its own "
                               f"prediction of native ({native:.1f} samples/s measured): "
                               "measure it for one window", verdict.gain, verdict.error,
                               verdict.adapt)
            trial = self._trial(candidates, predicted_current) \
                if native is not None and probe is None else None
            if trial is not None:
                self.explored_from = loop.current
                self._tried_ratio = (trial.predicted or 0.0) / predicted_current \
                    if predicted_current else None
                return Verdict("explore", trial.config, f"guard: measure the model's best "
                               f"scheduled pick, {trial.config.describe()}, for one window "
                               f"(predicted {trial.predicted or 0.0:.1f} samples/s; within the "
                               f"{self.explore_share:.0%} exploration budget)", verdict.gain,
                               verdict.error, verdict.adapt)
        elif self._native_next and left is not None:
            self._native_next = False  # the pick tried first: native, against the faster one
            here, there = loop.measured(loop.current), loop.measured(left)
            faster = here is not None and (there is None or here > there * (1 + self.noise_band))
            self.explored_from = loop.current if faster else left
            return Verdict("explore", loop.native, f"guard: measure the framework's own path "
                           f"(native) for one window, against "
                           f"{self.explored_from.describe()}, the faster of the pick and the "
                           "start beyond the noise band", verdict.gain, verdict.error,
                           verdict.adapt)
        elif left is not None and not left.scheduling:
            here = self._try_speed()  # a probe from native: kept if faster over its trial
            self._confirm = self.explored_from is None  # judged over its windows: kept
            if native is not None and here is not None and \
                    here <= native * (1 + self.noise_band):
                self._confirm = False
                self.explored_from = None
                self.vetoed[knobs(loop.current)] = self._windows
                self.misses += 1
                if self._tried_ratio:
                    self.overrated = min(self.overrated, here / native / self._tried_ratio)
                return Verdict("switch", left, f"guard: {here:.1f} samples/s measured on "
                               f"{loop.current.describe()}, not above native's {native:.1f} "
                               "beyond the noise band: back to native", verdict.gain,
                               verdict.error, verdict.adapt)
        elif left is not None and knobs(loop.current) in self.climbed:
            here, there = self._try_speed(), loop.measured(left)  # a climb: kept if faster
            if here is not None and there is not None and here <= there * (1 + self.noise_band):
                self.explored_from = None
                self.vetoed[knobs(loop.current)] = self._windows
                return Verdict("switch", left, f"guard: {here:.1f} samples/s measured on "
                               f"{loop.current.describe()}, not above the {there:.1f} of "
                               f"{left.describe()} beyond the noise band: back to it",
                               verdict.gain, verdict.error, verdict.adapt)
        elif native is None and (cheap or (lead := self._native_gain(
                candidates, predicted_current))[0]):
            self.explored_from = loop.current
            gain, pick = (0.0, None) if cheap else lead
            if pick is not None:
                self._native_next = True
                return Verdict("explore", pick, f"guard: the model ranks {pick.describe()} "
                               f"{gain:+.0%} above the configuration in force, which pays over "
                               "the job's horizon for two tries, its own and native's: measure "
                               "it for one window, then native against the faster of the two",
                               verdict.gain, verdict.error, verdict.adapt)
            why = "" if cheap else (f" (the model ranks it {gain:+.0%} above the "
                                    "configuration in force, which pays for the switch over "
                                    "the job's horizon)")
            return Verdict("explore", loop.native, "guard: measure the framework's own path "
                           f"(native) for one window{why}", verdict.gain, verdict.error,
                           verdict.adapt)
        elif left is None and native is not None and (since := self._recheck_due()):
            self.explored_from = loop.current
            self.recheck_fresh = True  # judged on the windows to come
            why = f"{loop.current.describe()} was kept on its try against a native measured " \
                f"before it" if self._confirm else f"native last measured {since:.0f} s of " \
                "training ago"
            self._confirm = False
            return Verdict("explore", loop.native, f"guard: {why}; measure native again for "
                           f"one window, beside {loop.current.describe()}'s latest",
                           verdict.gain, verdict.error, verdict.adapt)
        barred = None
        if verdict.action != "stay":
            why = self._barred(verdict.config, native) if verdict.config.scheduling else ""
            there, here = loop.measured(verdict.config), loop.measured(loop.current)
            if not why and there is not None and here is not None and \
                    there <= here * (1.0 + self.noise_band):
                why = (f"measured {there:.1f} samples/s, not above the {here:.1f} in force "
                       "beyond the noise band")
            if not why and verdict.action == "switch" and there is None and \
                    verdict.gain is not None and \
                    self._overrates(1.0 + verdict.gain):
                why = (f"the model's {verdict.gain:+.1%}, discounted by how far it overrated "
                       f"a pick that missed here ({self.overrated:.2f} of its ranking "
                       "measured), is no gain")
            if why:
                barred = verdict = Verdict("stay", loop.current, f"guard: not switching to "
                                           f"{verdict.config.describe()}, {why}", verdict.gain,
                                           verdict.error, verdict.adapt)
            elif verdict.action == "switch" and there is None and here is not None and \
                    loop.current.scheduling and verdict.config.scheduling:
                self.climbed.update((knobs(verdict.config), knobs(loop.current)))
                self.explored_from = loop.current  # judged as a climb: kept if faster
        current = loop.measured(loop.current)
        if native is not None and current is not None and loop.current.scheduling and \
                current < native * (1.0 - self.noise_band):
            self._slow_windows += 1
        else:
            self._slow_windows = 0
        if verdict.action == "stay" and self._slow_windows >= self.guard_windows:
            assert current is not None and native is not None
            self._slow_windows = 0
            self.vetoed[knobs(loop.current)] = self._windows
            self.misses += 1
            refuge, speed = self._best_measured(native)
            where = f"{refuge.describe()} ({speed:.1f})" if refuge.scheduling else "native"
            return Verdict("switch", refuge, f"guard: {current:.1f} samples/s measured on "
                           f"{loop.current.describe()}, {1 - current / native:.1%} below "
                           f"native's {native:.1f}: to {where}", verdict.gain, verdict.error,
                           verdict.adapt)
        climb = self._climb(native) if verdict.action == "stay" and \
            self.explored_from is None else None
        if climb is not None:
            assert current is not None and native is not None
            self.climb_s += self._miss_s(1)
            self.climbed.update((knobs(climb), knobs(loop.current)))  # adapting forgets
            self.explored_from = loop.current
            return Verdict("explore", climb, f"guard: {loop.current.describe()} runs "
                           f"{current / native:.2f}x native; measure its neighbour "
                           f"{climb.describe()} for one window (the climbs so far and this one "
                           f"within {self.explore_share:.0%} of the time trained)", verdict.gain,
                           verdict.error, verdict.adapt)
        return barred

    def _try_speed(self) -> float | None:
        """The speed of the try in force: its mean over its first windows, their median once
        it has ``JUDGED_WINDOWS``; then the try is no longer one (``explored_from`` cleared:
        later windows are the slow-window rule's)."""
        loop = self.loop
        over = loop.runs(loop.current) >= JUDGED_WINDOWS
        if over:
            self.explored_from = None
        return loop.measured(loop.current, median=over)

    def _go_back(self, native: float | None) -> Config | None:
        """Under conditions seen before: the fastest configuration measured under them, when
        faster than the one in force beyond ``noise_band`` (native as ``_best_measured``
        decides it) and what it saves pays for the switch: from when the switch is in force
        (the decision's lead) for as long as they held the last time, less what they have
        held already, or, once they have held longer, for as long again as they outlasted it.
        Conditions that come and go faster than a decision lands are not followed: the switch
        would land in the next ones."""
        loop = self.loop
        here = loop.measured(loop.current)
        if native is None or here is None:
            return None
        best, speed = self._best_measured(native)
        if knobs(best) == knobs(loop.current) or speed <= here * (1 + self.noise_band):
            return None
        ahead = abs(loop.expect_s - loop.lasted_s) - loop.lead(loop.step_s) * loop.step_s
        saved = ahead * (1.0 - here / speed)
        return best if saved > loop.switch_cost_s else None

    def _recheck_interval(self) -> float:
        loop = self.loop
        return self._recheck_every or max(RECHECK_S, RECHECK_WINDOWS * loop.window_s)

    def _recheck_due(self) -> float:
        """Training time since native's last window when it is due to be measured again (0 if
        not): on a scheduled configuration measured less than ``RECHECK_GAIN`` faster than
        native, once ``_recheck_interval`` has passed and the two switches to configurations
        run before fit ``guard_budget`` of it. Speeds on a busy machine drift by up to a tenth
        in phases lasting seconds, so such a gain, measured against native's windows of
        another phase, may not be there; measured next to each other, the two compare, and each
        check that keeps the configuration doubles the wait for the next. A try from native
        kept on its windows (``_confirm``) is checked at once, whatever its gain, once what
        the check costs (``_confirm_s``) fits ``guard_budget`` of the time trained and the job
        has time left to pay it back: its native was measured before it, and a phase here
        moves a whole job by a fifth (TensorFlow's cnn at 3gbit kept a try measured 17% above
        a native of a slow phase, which then ran 11% below native for the rest of the job)."""
        loop = self.loop
        here, native = loop.measured(loop.current), loop.measured(loop.native)
        if not loop.current.scheduling or loop.native_s is None or here is None or \
                native is None:
            return 0.0
        since = loop.trained_s - loop.native_s
        if self._confirm:  # both switches go to configurations traced already
            cost = self._confirm_s(here, native, loop.back_cost_s or 0.0)
            affordable = cost <= self.guard_budget * loop.trained_s and not self._too_late(cost)
            return max(since, 1e-9) if affordable else 0.0
        if here >= native * (1 + RECHECK_GAIN):
            return 0.0
        back = loop.back_cost_s
        back = loop.switch_cost_s if back is None else back
        interval = self._recheck_interval()
        return since if since >= interval and 2 * back <= self.guard_budget * interval else 0.0

    def _confirm_s(self, here: float, native: float, back: float) -> float:
        """What measuring native beside a configuration running ``here`` (native measured at
        ``native``) costs if the gain is real: the two switches (``back`` each: both go to a
        configuration run before, which costs a TensorFlow job no trace, so before one is
        measured nothing: a first trace would price the check out of most jobs) and native's
        window with the decision's lead on each side, at native's speed."""
        loop = self.loop
        windows = 1 + 2 * math.ceil(loop.lead(loop.step_s) / loop.window_steps)
        return 2 * back + windows * loop.window_s * max(0.0, 1.0 - native / here)

    def _best_measured(self, native: float) -> tuple[Config, float]:
        """Where a job leaving a slow configuration goes: the fastest one measured under the
        conditions in force, if faster than native beyond the noise band and not barred (a
        trigger that left a good configuration for a worse one goes back), else native."""
        loop = self.loop
        best = max(((c, speed) for k, c in loop.ran().items() if c.scheduling
                    and k not in self.vetoed and (speed := loop.measured(c)) is not None),
                   key=lambda cs: cs[1], default=None)
        if best is not None and best[1] > native * (1 + self.noise_band):
            return loop.current.replace(partition_bytes=best[0].partition_bytes,
                                        credit_bytes=best[0].credit_bytes,
                                        scheduling=True), best[1]
        return loop.native, native

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
        loop = self.loop
        here = loop.measured(loop.current)
        if self.explore_share is None or native is None or here is None or \
                not loop.current.scheduling or here <= native * (1 + self.noise_band):
            return None
        pool = loop.pool()
        p, c = loop.current.partition_bytes, loop.current.credit_bytes
        steps = {(p * 2, c), (p // 2, c), (p * 2, c * 2), (p // 2, c // 2), (p, c * 2),
                 (p, c // 2)}
        near = [x for x in pool if x.scheduling and (x.partition_bytes, x.credit_bytes) in steps
                and knobs(x) not in self.climbed and knobs(x) not in self.vetoed
                and loop.measured(x) is None]
        if not near or self.climb_s + self._miss_s(1) > self.explore_share * loop.lasted_s \
                or self._too_late(self._miss_s(1)):
            return None
        predicted = loop.predictions(near)
        if predicted is None:
            return None
        return max(zip(near, predicted, strict=True), key=lambda xp: xp[1])[0]

    def _native_gain(self, candidates: Sequence[Candidate], predicted_current: float | None,
                     ) -> tuple[float, Config | None]:
        """On a scheduled configuration before native is measured: the model's prediction of
        native over its own of the configuration in force, less one, when that gain, counted
        as a probe's (``PROBE_TRUST``, at most ``PROBE_GAIN_CAP``), pays over the horizon for a
        miss; else that of its best scheduled pick not measured yet (returned with it), which
        must pay for two, its own try and native's; else (0, None). A job started on a poor
        configuration then leaves it at its first decision, not once the switch is cheap for
        the job (20 times the cost trained), also where the model ranks native below it."""
        loop = self.loop
        if not predicted_current or predicted_current <= 0:
            return 0.0, None
        predicted = loop.predictions([loop.native])
        if predicted is None:
            return 0.0, None
        gain = predicted[0] / predicted_current - 1.0
        if gain > 0 and self._pays_as_probe(gain):
            return gain, None
        best = self._best_untried(candidates, budget=False)
        gain = (best.predicted or 0.0) / predicted_current - 1.0 if best is not None else 0.0
        if best is not None and gain > 0 and self._pays_as_probe(gain, tries=2):
            return gain, best.config
        return 0.0, None

    def _pays_as_probe(self, gain: float, *, tries: int = 1) -> bool:
        """A model's ranked ``gain`` pays for ``tries`` one-window tries: ``PROBE_TRUST`` of it
        (at most ``PROBE_GAIN_CAP``) over the loop's horizon covers as many misses (under
        conditions seen before, every time they are expected to hold: what a try measures
        comes back with them)."""
        loop = self.loop
        return tries * self._miss_s(1) <= PROBE_TRUST * min(gain, PROBE_GAIN_CAP) * loop.horizon_s

    def _probe(self, candidates: Sequence[Candidate],
               predicted_current: float | None) -> Candidate | None:
        """On native: the scheduled configuration the model ranks above native by more than
        the trigger's gain threshold, compared with its own prediction of native (a model far
        off on an unseen job still ranks; its absolute speeds mislead the trigger), not
        measured yet nor barred. Once per conditions, so a wrong ranking costs one window."""
        loop = self.loop
        if self.probed or not predicted_current or predicted_current <= 0:
            return None
        threshold = getattr(loop.trigger, "gain_threshold", 0.05)
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
        return bool(self.misses) and ratio * self.overrated <= 1.0

    def _best_untried(self, candidates: Sequence[Candidate], *,
                      budget: bool = True) -> Candidate | None:
        """The model's best scheduled candidate this job has neither measured nor left under
        the conditions in force, if a try from native (left after one window) may go there;
        ``budget=False``: whether a miss fits the exploration budget is left to the caller."""
        loop = self.loop
        ranked = [c for c in candidates if c.predicted is not None and c.config.scheduling
                  and loop.measured(c.config) is None and knobs(c.config) not in self.vetoed
                  and not self._barred(c.config, None, windows=1, budget=budget)]
        return max(ranked, key=lambda c: c.predicted or 0.0, default=None)

    def _barred(self, config: Config, native: float | None, *,
                windows: int | None = None, budget: bool = True) -> str:
        """Why the guard will not switch to ``config`` ('' if it may)."""
        loop = self.loop
        measured = loop.measured(config)
        if measured is None and budget and (short := self._unaffordable(windows)):
            return short
        miss = self._miss_s(self.guard_windows if windows is None else windows)
        if measured is None and budget and self._follows_model and self._too_late(miss):
            return (f"the job ends in about {loop.left_s:.1f} s, too soon to pay back a miss "
                    f"of {miss:.2f} s")
        if self.misses >= MAX_MISSES and measured is None:
            return (f"the model's picks measured slower than native {self.misses} times under "
                    "these conditions: only measured configurations until they change")
        left = self.vetoed.get(knobs(config))
        if left is not None and self._windows - left <= self.veto_windows:
            return (f"the guard left it {self._windows - left} window(s) ago, measured no "
                    "faster than what it was tried against")
        if native is not None and measured is not None and \
                measured < native * (1.0 - self.noise_band):
            return f"measured {measured:.1f} samples/s, below native's {native:.1f}"
        return ""

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
        loop = self.loop
        if self.explore_share is None or not self._follows_model:
            return ""
        if loop.measured(loop.native) is None:
            return "native is not measured yet (every try is measured against it)"
        miss = self._miss_s(self.guard_windows if windows is None else windows)
        allowed = self.explore_share * loop.trained_s
        if loop.lost_s + miss <= allowed:
            return ""
        return (f"a miss would cost about {miss:.2f} s and this job has lost {loop.lost_s:.2f} s "
                f"to native, above {self.explore_share:.0%} of the {loop.trained_s:.1f} s "
                "trained")

    def _miss_s(self, windows: int) -> float:
        """What a try left after ``windows`` windows is expected to cost (``_unaffordable``)."""
        loop = self.loop
        on_s = (windows + math.ceil(loop.lead(loop.step_s) / loop.window_steps)) * loop.window_s
        there, back = loop.new_cost_s, loop.back_cost_s or 0.0
        return there + back + on_s * MISS_SLOWDOWN

    def _too_late(self, cost_s: float) -> bool:
        """The job ends before a try costing ``cost_s`` pays it back at the least gain the
        guard keeps (``noise_band``): near a known end, the model's picks are not tried (the
        guard still measures native, which only protects)."""
        loop = self.loop
        return cost_s > self.noise_band * loop.left_s

    @property
    def _follows_model(self) -> bool:
        """The tuner predicts (a model): its tries are the guard's to price. Search tuners
        explore by design."""
        loop = self.loop
        return callable(getattr(loop.tuner, "predict", None))
