"""The AutoByte paper's optimization trigger (§III-C), with hysteresis and cooldown added.

Switch only when the best candidate's predicted gain exceeds ``gain_threshold`` (paper: 5%), so
the job does not wander around the optimum chasing prediction noise. Request online adaptation
of the predictor when its relative error on the configuration in force exceeds
``adapt_threshold`` (paper: 10%) for ``adapt_patience`` windows in a row (one noisy window is
not a changed environment), and at most once per ``adapt_cooldown`` windows (adapting costs
rank 0 seconds of CPU, and real windows are noisy enough to miss by 10% often). Three additions
make oscillation impossible rather than unlikely: a cooldown (``cooldown_windows`` windows on a
new configuration before the next switch), hysteresis that grows with every return (going back
to a configuration left k times needs ``gain_threshold + hysteresis * 2**(k-1)``, so bounded
noise can flip the job only a few times in the whole run; departures are remembered for
``memory_windows`` windows, by default until ``reset()``, which the coordinator calls when the
environment changed and the tuner adapts), and confirmation of marginal gains (a gain below
twice what is needed must be predicted in two consecutive windows; a large one switches at
once). A switch must also pay for itself: when switching has a measured cost (TensorFlow
retraces the step: seconds) and the job's remaining time is estimated, the time the gain
would save over that remaining time must exceed the cost. Exploring a candidate nobody can
predict yet (a search tuner's proposal) comes first and is subject to none of this: each
configuration is explored once, after which it has a measured speed, so a search tuner runs
its experiments in its own order. At most ``explore_budget``
experiments run between resets (an online search over 176 points would otherwise never settle);
after that only measured or predicted configurations compete, until an adaptation request (the
environment changed) resets the trigger and refills the budget.

The gain is measured against the predicted speed of the configuration in force while the
predictor is accurate (a bias shared by all candidates cancels), and against the observed speed
when it is not. A window whose prediction missed, without adaptation yet, never switches: the
candidates' predictions may be as stale as the one that just missed; when it asks for
adaptation, past measurements (``Candidate.measured``) no longer count. Within
``adapt_cooldown`` of an adaptation a miss does not hold the job: the predictor has just fitted
this job's windows, so what it still misses is its error on this job, not a change (on a model
it never saw that error stays above 10%, and waiting would freeze the job until the cooldown
ends).
"""

from __future__ import annotations

from collections.abc import Sequence

from common.config import Config
from common.errors import ConfigError
from common.trigger._base import Candidate, Trigger, Verdict, knobs

__all__ = ["ThresholdTrigger"]


class ThresholdTrigger(Trigger):
    def __init__(self, *, gain_threshold: float = 0.05, adapt_threshold: float = 0.10,
                 hysteresis: float = 0.05, cooldown_windows: int = 2,
                 memory_windows: int | None = None, adapt_patience: int = 2,
                 explore: bool = True, explore_budget: int | None = 16,
                 adapt_cooldown: int = 6) -> None:
        for name, value in (("gain_threshold", gain_threshold),
                            ("adapt_threshold", adapt_threshold), ("hysteresis", hysteresis)):
            if not 0.0 <= value <= 10.0:
                raise ConfigError(f"{name} must be between 0 and 10, got {name}={value!r}")
        for name, count in (("cooldown_windows", cooldown_windows),
                            ("memory_windows", memory_windows or 0),
                            ("explore_budget", explore_budget or 0),
                            ("adapt_patience", adapt_patience),
                            ("adapt_cooldown", adapt_cooldown)):
            if count < (1 if name == "adapt_patience" else 0):
                raise ConfigError(f"{name} must be >= {int(name == 'adapt_patience')}, "
                                  f"got {name}={count!r}")
        self.gain_threshold = gain_threshold
        self.adapt_threshold = adapt_threshold
        self.hysteresis = hysteresis
        self.cooldown_windows = cooldown_windows
        self.memory_windows = memory_windows
        self.adapt_patience = adapt_patience
        self.explore = explore
        self.explore_budget = explore_budget
        self.adapt_cooldown = adapt_cooldown
        self._windows_seen = 0  # survives reset(): the adaptation cooldown spans resets
        self._adapted_at: int | None = None
        self.reset()

    def reset(self) -> None:
        self._window = 0
        self._since_switch = self.cooldown_windows
        self._misses = 0
        self._left: dict[tuple[int, int, bool], tuple[int, int]] = {}
        self._pending: tuple[int, int, bool] | None = None
        self._explored = 0
        self._undo: tuple[tuple[int, int, bool], tuple[int, int] | None, int] | None = None

    def decide(self, *, current: Config, observed: float, predicted_current: float | None,
               candidates: Sequence[Candidate], switch_cost_s: float = 0.0,
               horizon_s: float | None = None) -> Verdict:
        self._window += 1
        self._since_switch += 1
        self._undo = None
        error, adapt = self._check_prediction(observed, predicted_current)
        if observed <= 0:
            return Verdict("stay", current, "no measured steps in this window", error=error,
                           adapt=adapt)
        if self._misses and not self._cooling():
            return Verdict("stay", current, f"prediction off by {error:.0%}: waiting a window to "
                           "see whether conditions changed", None, error, adapt)
        others = [c for c in candidates if knobs(c.config) != knobs(current)
                  and not (adapt and c.measured)]
        known = [c for c in others if c.predicted is not None]
        accurate = error is not None and error <= self.adapt_threshold
        baseline = predicted_current if accurate and predicted_current else observed
        best = max(known, key=lambda c: c.predicted or 0.0, default=None)
        gain = None if best is None else (best.predicted or 0.0) / baseline - 1.0
        unknown = [c for c in others if c.predicted is None]
        if unknown and self.exploring():
            self._explored += 1
            return self._switch("explore", current, unknown[0], gain, error, adapt,
                                f"{unknown[0].source}'s proposal has no prediction yet: "
                                "measure it for one window")
        needed = self.gain_threshold + (self._extra(best) if best is not None else 0.0)
        if best is not None and gain is not None:
            pending, self._pending = self._pending, None
            if gain > needed:
                if self._since_switch <= self.cooldown_windows:
                    left = self.cooldown_windows - self._since_switch + 1
                    return Verdict("stay", current, f"cooldown: {left} more window(s) before "
                                   f"switching (best predicts {gain:+.1%})", gain, error, adapt)
                saved = None if horizon_s is None else horizon_s * gain / (1.0 + gain)
                if switch_cost_s > 0 and saved is not None and saved < switch_cost_s:
                    return Verdict("stay", current, f"{best.source} predicts {gain:+.1%}, but "
                                   f"a switch costs {switch_cost_s:.2f} s and would save "
                                   f"{saved:.2f} s of the expected {horizon_s:.1f} s left",
                                   gain, error, adapt)
                if gain < 2 * needed and pending != knobs(best.config):
                    self._pending = knobs(best.config)
                    return Verdict("stay", current, f"{best.source} predicts {gain:+.1%} > "
                                   f"{needed:.1%}: confirm in the next window", gain, error, adapt)
                return self._switch("switch", current, best, gain, error, adapt,
                                    f"{best.source} predicts {gain:+.1%} > {needed:.1%}")
        if best is None:
            why = "no other candidate" if not unknown else (
                f"exploration budget ({self.explore_budget}) spent; no measured alternative")
            return Verdict("stay", current, why, None, error, adapt)
        return Verdict("stay", current, f"best candidate predicts {gain:+.1%}, not above "
                       f"{needed:.1%}", gain, error, adapt)

    def exploring(self) -> bool:
        return self.explore and (self.explore_budget is None
                                 or self._explored < self.explore_budget)

    def _check_prediction(self, observed: float,
                          predicted: float | None) -> tuple[float | None, bool]:
        if predicted is None or observed <= 0:
            self._misses = 0  # nothing to compare: the run of misses ends here
            return None, False
        self._windows_seen += 1
        error = abs(predicted - observed) / observed
        self._misses = self._misses + 1 if error > self.adapt_threshold else 0
        if self._misses >= self.adapt_patience and not self._cooling():
            self._misses = 0
            self._adapted_at = self._windows_seen
            return error, True
        return error, False

    def _cooling(self) -> bool:
        """Within ``adapt_cooldown`` windows of the last adaptation request."""
        return self._adapted_at is not None and \
            self._windows_seen - self._adapted_at < self.adapt_cooldown

    def _remembered(self, left_at: int) -> bool:
        return self.memory_windows is None or self._window - left_at <= self.memory_windows

    def _extra(self, candidate: Candidate) -> float:
        """Hysteresis for returning to ``candidate``: doubles with every recent departure."""
        at, times = self._left.get(knobs(candidate.config), (0, 0))
        if not times or not self._remembered(at):
            return 0.0
        return self.hysteresis * 2.0 ** (times - 1)

    def _switch(self, action: str, current: Config, to: Candidate, gain: float | None,
                error: float | None, adapt: bool, reason: str) -> Verdict:
        if action == "explore":
            return Verdict("explore", to.config, reason, gain, error, adapt)
        key = knobs(current)
        self._undo = (key, self._left.get(key), self._since_switch)
        at, times = self._left.get(key, (0, 0))
        recent = times and self._remembered(at)
        self._left[key] = (self._window, times + 1 if recent else 1)
        self._since_switch = 0
        return Verdict("switch", to.config, reason, gain, error, adapt)

    def withdraw(self) -> None:
        if self._undo is None:
            return
        key, left, self._since_switch = self._undo
        if left is None:
            self._left.pop(key, None)
        else:
            self._left[key] = left
        self._undo = None
