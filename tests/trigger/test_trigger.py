"""Trigger policies: gain threshold, adaptation requests, hysteresis, cooldown, no oscillation."""

from __future__ import annotations

import math

import pytest

from common.config import Config
from common.errors import ConfigError
from common.trigger import Candidate, ThresholdTrigger, create, knobs

A = Config(partition_bytes="1MiB", credit_bytes="4MiB")
B = Config(partition_bytes="256KiB", credit_bytes="2MiB")
C = Config(partition_bytes="4MiB", credit_bytes="16MiB")


def test_switches_only_above_gain_threshold() -> None:
    t = ThresholdTrigger(gain_threshold=0.05, cooldown_windows=0)
    v = t.decide(current=A, observed=100, predicted_current=100,
                 candidates=[Candidate(B, 104.0)])
    assert v.action == "stay" and v.config == A and "+4.0%" in v.reason
    v = t.decide(current=A, observed=100, predicted_current=100,
                 candidates=[Candidate(B, 104.0), Candidate(C, 112.0)])
    assert v.action == "switch" and v.config == C and v.gain == pytest.approx(0.12)


def test_marginal_gain_must_be_confirmed_in_the_next_window() -> None:
    t = ThresholdTrigger(gain_threshold=0.05, cooldown_windows=0)
    first = t.decide(current=A, observed=100, predicted_current=100,
                     candidates=[Candidate(B, 107.0)])
    assert first.action == "stay" and "confirm" in first.reason
    second = t.decide(current=A, observed=100, predicted_current=100,
                      candidates=[Candidate(B, 107.0)])
    assert second.action == "switch" and second.config == B
    # An unconfirmed marginal gain (noise) is forgotten.
    t2 = ThresholdTrigger(gain_threshold=0.05, cooldown_windows=0)
    for predicted in (107.0, 101.0, 107.0):
        v = t2.decide(current=A, observed=100, predicted_current=100,
                      candidates=[Candidate(B, predicted)])
        assert v.action == "stay"


def test_gain_is_relative_to_predicted_current_so_bias_cancels() -> None:
    t = ThresholdTrigger(cooldown_windows=0)
    # The model over-predicts everything by 8% (within adapt_threshold): no spurious switch.
    v = t.decide(current=A, observed=100, predicted_current=108,
                 candidates=[Candidate(B, 110.0)])
    assert v.action == "stay" and v.gain == pytest.approx(110 / 108 - 1)


def test_adaptation_requested_after_patience_windows_of_large_error() -> None:
    t = ThresholdTrigger(adapt_threshold=0.10, adapt_patience=2)
    v1 = t.decide(current=A, observed=100, predicted_current=130, candidates=[])
    v2 = t.decide(current=A, observed=100, predicted_current=130, candidates=[])
    v3 = t.decide(current=A, observed=100, predicted_current=105, candidates=[])
    assert (v1.adapt, v2.adapt, v3.adapt) == (False, True, False)
    assert v2.error == pytest.approx(0.3)
    one = ThresholdTrigger(adapt_patience=1)
    assert one.decide(current=A, observed=100, predicted_current=89, candidates=[]).adapt


def test_adaptation_is_asked_at_most_once_per_adapt_cooldown_windows() -> None:
    t = ThresholdTrigger(adapt_patience=1, adapt_cooldown=3)
    asked = []
    for _ in range(7):  # the predictor misses by 30% in every window
        asked.append(t.decide(current=A, observed=100, predicted_current=130,
                              candidates=[]).adapt)
        if asked[-1]:
            t.reset()  # what the coordinator does when it adapts; the cooldown survives it
    assert asked == [True, False, False, True, False, False, True]
    with pytest.raises(ConfigError, match="adapt_cooldown"):
        ThresholdTrigger(adapt_cooldown=-1)


def test_a_miss_right_after_an_adaptation_does_not_hold_the_job() -> None:
    # A model 15% off on this job whatever it adapts: after it adapted, the misses are its
    # error, so the gain is judged against the observed speed instead of waiting a window.
    t = ThresholdTrigger(cooldown_windows=0, adapt_patience=2, adapt_cooldown=6)
    verdicts = [t.decide(current=A, observed=100, predicted_current=115,
                         candidates=[Candidate(B, 140.0)]) for _ in range(3)]
    assert [v.action for v in verdicts] == ["stay", "switch", "switch"]
    assert "prediction off" in verdicts[0].reason and verdicts[1].adapt
    assert not verdicts[2].adapt and verdicts[2].gain == pytest.approx(0.4)
    # Once the cooldown is over, a miss is again a sign that conditions changed.
    t = ThresholdTrigger(cooldown_windows=0, adapt_patience=2, adapt_cooldown=1)
    for _ in range(2):
        t.decide(current=A, observed=100, predicted_current=115, candidates=[])
    v = t.decide(current=A, observed=100, predicted_current=115,
                 candidates=[Candidate(B, 140.0)])
    assert v.action == "stay" and "waiting a window" in v.reason


def test_when_predictor_is_off_gain_uses_observed_speed() -> None:
    t = ThresholdTrigger(cooldown_windows=0, adapt_patience=2)
    first = t.decide(current=A, observed=100, predicted_current=200,
                     candidates=[Candidate(B, 150.0)])
    assert first.action == "stay" and "prediction off by 100%" in first.reason
    v = t.decide(current=A, observed=100, predicted_current=200,
                 candidates=[Candidate(B, 150.0)])
    assert v.adapt and v.action == "switch" and v.gain == pytest.approx(0.5)


def test_cooldown_blocks_switch_right_after_a_switch() -> None:
    t = ThresholdTrigger(cooldown_windows=2, hysteresis=0.0)
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(B, 120.0)]).action == "switch"
    actions = [t.decide(current=B, observed=120, predicted_current=120,
                        candidates=[Candidate(C, 150.0)]).action for _ in range(3)]
    assert actions == ["stay", "stay", "switch"]


def test_a_withdrawn_switch_starts_no_cooldown_and_leaves_nothing() -> None:
    t = ThresholdTrigger(cooldown_windows=2, hysteresis=0.05)
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(B, 120.0)]).action == "switch"
    t.withdraw()  # the guard kept A: the next window may switch, and A has no hysteresis
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(C, 120.0)]).action == "switch"
    assert t.decide(current=C, observed=100, predicted_current=100,
                    candidates=[Candidate(A, 130.0)]).action == "stay"  # cooldown after C
    t.decide(current=C, observed=100, predicted_current=100, candidates=[])
    back = t.decide(current=C, observed=100, predicted_current=100,
                    candidates=[Candidate(A, 112.0)])
    # A was left once (to C), not twice: 5% + 5% needed, not 5% + 10%
    assert back.action == "stay" and "> 10.0%: confirm" in back.reason
    t.withdraw()  # after a stay: nothing to take back
    assert t.decide(current=C, observed=100, predicted_current=100,
                    candidates=[Candidate(A, 112.0)]).action == "switch"


def test_hysteresis_makes_going_back_harder() -> None:
    t = ThresholdTrigger(gain_threshold=0.05, hysteresis=0.05, cooldown_windows=0)
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(B, 111.0)]).action == "switch"
    for _ in range(3):
        back = t.decide(current=B, observed=100, predicted_current=100,
                        candidates=[Candidate(A, 108.0)])
        assert back.action == "stay"
    assert t.decide(current=B, observed=100, predicted_current=100,
                    candidates=[Candidate(A, 121.0)]).action == "switch"
    # Leaving B a second time within memory doubles the extra needed to return to it.
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(B, 130.0)]).action == "switch"
    assert t.decide(current=B, observed=100, predicted_current=100,
                    candidates=[Candidate(A, 118.0)]).action == "stay"


def test_unknown_candidate_is_explored_without_cooldown_or_hysteresis() -> None:
    t = ThresholdTrigger(cooldown_windows=3)
    v = t.decide(current=A, observed=100, predicted_current=None, candidates=[Candidate(B)])
    assert v.action == "explore" and v.config == B
    # The tuner's next experiment comes before returning to the measured best.
    v = t.decide(current=B, observed=80, predicted_current=None,
                 candidates=[Candidate(C), Candidate(A, 100.0, "history")])
    assert v.action == "explore" and v.config == C
    # C measured worse too; A (measured 100) is 25% better: go back at once, no cooldown.
    v = t.decide(current=C, observed=80, predicted_current=None,
                 candidates=[Candidate(A, 100.0, "history")])
    assert v.action == "switch" and v.config == A
    quiet = ThresholdTrigger(explore=False).decide(
        current=A, observed=100, predicted_current=None, candidates=[Candidate(B)])
    assert quiet.action == "stay"


@pytest.mark.parametrize(("amplitude", "most"), [(0.04, 2), (0.09, 5)])
@pytest.mark.parametrize("period", [2, 4, 7, 20, 50])
def test_noisy_oscillating_speeds_never_oscillate(period: int, amplitude: float,
                                                  most: int) -> None:
    """A and B are equally fast, but the current one looks slower and the other faster in
    antiphase swings (apparent gains up to ~8% or ~20%): a bare 5% threshold would flip every
    few windows for all 300 windows; here the number of switches is bounded."""
    t = ThresholdTrigger()
    current, switches = A, 0
    for w in range(300):
        swing = amplitude * math.sin(2 * math.pi * w / period + 0.3)
        other = B if knobs(current) == knobs(A) else A
        v = t.decide(current=current, observed=100.0 * (1 - swing),
                     predicted_current=100.0 * (1 - swing),
                     candidates=[Candidate(other, 100.0 * (1 + swing))])
        if v.action != "stay":
            switches += 1
            current = v.config
    assert switches <= most


def test_bare_threshold_would_oscillate_under_the_same_noise() -> None:
    """The test above is meaningful: without cooldown, hysteresis and confirmation it fails."""
    t = ThresholdTrigger(cooldown_windows=0, hysteresis=0.0, gain_threshold=0.025)
    current, switches = A, 0
    for w in range(300):
        swing = 0.09 * math.sin(2 * math.pi * w / 4 + 0.3)
        other = B if knobs(current) == knobs(A) else A
        v = t.decide(current=current, observed=100.0 * (1 - swing),
                     predicted_current=100.0 * (1 - swing),
                     candidates=[Candidate(other, 100.0 * (1 + swing))])
        if v.action != "stay":
            switches += 1
            current = v.config
    assert switches > 50


def test_memory_expires_and_reset_forgets() -> None:
    t = ThresholdTrigger(cooldown_windows=0, memory_windows=2)
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(B, 120.0)]).action == "switch"
    for _ in range(3):
        t.decide(current=B, observed=100, predicted_current=100, candidates=[])
    assert t.decide(current=B, observed=100, predicted_current=100,
                    candidates=[Candidate(A, 111.0)]).action == "switch"
    t.reset()
    assert t.decide(current=A, observed=100, predicted_current=100,
                    candidates=[Candidate(B, 111.0)]).action == "switch"


def test_real_gain_still_wins_under_noise() -> None:
    t = ThresholdTrigger()
    v = None
    for w in range(5):
        swing = 0.03 * (-1) ** w
        v = t.decide(current=A, observed=100 * (1 + swing), predicted_current=100,
                     candidates=[Candidate(B, 130.0 * (1 - swing))])
        if v.action == "switch":
            break
    assert v is not None and v.action == "switch" and v.config == B


def test_no_measurement_means_stay() -> None:
    v = ThresholdTrigger().decide(current=A, observed=0.0, predicted_current=None,
                                  candidates=[Candidate(B, 1e9)])
    assert v.action == "stay" and "no measured" in v.reason


def test_other_policies_and_factory() -> None:
    assert create("never").decide(current=A, observed=1, predicted_current=None,
                                  candidates=[Candidate(B, 1e9)]).action == "stay"
    v = create("always").decide(current=A, observed=1, predicted_current=None,
                                candidates=[Candidate(A), Candidate(B)])
    assert v.action == "switch" and v.config == B
    t = create("threshold", config=Config(gain_threshold=0.2))
    assert isinstance(t, ThresholdTrigger) and t.gain_threshold == 0.2
    with pytest.raises(ConfigError, match="trigger='sometimes'"):
        create("sometimes")
    with pytest.raises(ConfigError, match="cooldown_windows"):
        ThresholdTrigger(cooldown_windows=-1)
    with pytest.raises(ConfigError, match=r"gain_threshold=-0\.1"):
        ThresholdTrigger(gain_threshold=-0.1)


def test_exploration_budget_then_only_measured_candidates_until_reset() -> None:
    configs = [Config(partition_bytes=f"{64 * 2**k}KiB", credit_bytes="64MiB")
               for k in range(6)]
    t = ThresholdTrigger(explore_budget=3, cooldown_windows=0)
    current = configs[0]
    actions = []
    for nxt in configs[1:]:
        v = t.decide(current=current, observed=100, predicted_current=None,
                     candidates=[Candidate(nxt)])
        actions.append(v.action)
        current = v.config
    assert actions == ["explore", "explore", "explore", "stay", "stay"]
    assert "budget (3) spent" in v.reason
    t.reset()
    assert t.decide(current=current, observed=100, predicted_current=None,
                    candidates=[Candidate(configs[0])]).action == "explore"
    unlimited = ThresholdTrigger(explore_budget=None)
    assert all(unlimited.decide(current=configs[0], observed=100, predicted_current=None,
                                candidates=[Candidate(c)]).action == "explore"
               for c in configs[1:] * 10)


def test_adapting_ignores_past_measurements_but_not_model_predictions() -> None:
    t = ThresholdTrigger(adapt_patience=1, cooldown_windows=0)
    stale = t.decide(current=A, observed=40, predicted_current=1000,
                     candidates=[Candidate(B, 1000.0, "history", measured=True)])
    assert stale.adapt and stale.action == "stay"
    t2 = ThresholdTrigger(adapt_patience=1, cooldown_windows=0)
    model = t2.decide(current=A, observed=40, predicted_current=1000,
                      candidates=[Candidate(B, 90.0, "model")])
    assert model.adapt and model.action == "switch"


def test_a_window_without_prediction_after_a_miss_is_decided() -> None:
    """A missed prediction, then a configuration the predictor cannot score: the run of
    misses ends (it used to format a missing error and lose the window)."""
    t = ThresholdTrigger(adapt_patience=2)
    first = t.decide(current=A, observed=100, predicted_current=150, candidates=[])
    assert first.action == "stay" and "prediction off by 50%" in first.reason
    second = t.decide(current=B, observed=100, predicted_current=None,
                      candidates=[Candidate(A, 120.0)])
    assert second.error is None and not second.adapt
    assert "prediction off" not in second.reason


def test_a_switch_must_pay_for_its_measured_cost_over_the_expected_remaining_time() -> None:
    # +25% saves horizon * 0.25 / 1.25 = 20% of the remaining time: 2 s of 10 s
    def decide(cost: float, horizon: float | None) -> str:
        t = ThresholdTrigger(cooldown_windows=0)
        return t.decide(current=A, observed=100, predicted_current=100,
                        candidates=[Candidate(B, 125.0)], switch_cost_s=cost,
                        horizon_s=horizon).action
    assert decide(2.5, 10.0) == "stay"
    assert decide(1.5, 10.0) == "switch"
    assert decide(2.5, 20.0) == "switch"       # a longer job pays the same switch back
    assert decide(0.0, 1.0) == "switch"        # no cost measured yet
    assert decide(2.5, None) == "switch"       # remaining time unknown
    t = ThresholdTrigger(cooldown_windows=0)
    v = t.decide(current=A, observed=100, predicted_current=100,
                 candidates=[Candidate(B, 125.0)], switch_cost_s=2.5, horizon_s=10.0)
    assert "costs 2.50 s" in v.reason and "save 2.00 s" in v.reason and v.gain == 0.25
