"""The memory of conditions a job left: recall by link rate and speed, merging by rate."""

from __future__ import annotations

import collections
import dataclasses

from control_helpers import observation

from common.config import Config
from common.control._conditions import Conditions, Memory

NATIVE, SMALL = (0, 0, False), (65536, 1 << 20, True)


def _conditions(speeds: dict[tuple[int, int, bool], float], rate: float,
                lasted_s: float = 1.0) -> Conditions:
    return Conditions(history={k: collections.deque([v]) for k, v in speeds.items()},
                      lasted_s=lasted_s, total_s=lasted_s, rates=(rate,) * 3)


def test_recall_needs_the_rate_and_the_speed_in_force_to_match_where_known() -> None:
    memory = Memory()
    memory.leave(_conditions({NATIVE: 300.0}, rate=70e6))
    memory.leave(_conditions({NATIVE: 2400.0}, rate=600e6))
    assert memory.recall(NATIVE, 2400.0, rate=60e6) is None  # the rate says slow, speed fast
    assert memory.recall(SMALL, 420.0, rate=100e6).history[NATIVE][0] == 300.0  # rate alone
    assert len(memory) == 1 and memory.recall(NATIVE, 2300.0, rate=None) is not None
    assert memory.recall(NATIVE, 2300.0, rate=None) is None  # taken back already


def test_a_stretch_left_unrecognised_merges_into_the_set_of_its_rate() -> None:
    memory = Memory()
    memory.leave(_conditions({NATIVE: 300.0}, rate=70e6, lasted_s=4.0))
    memory.leave(_conditions({NATIVE: 2400.0}, rate=600e6))
    memory.leave(_conditions({SMALL: 420.0}, rate=95e6, lasted_s=3.0))  # the slow link again
    assert len(memory) == 2
    back = memory.recall(NATIVE, 310.0, rate=80e6)
    assert back is not None and back.speed(NATIVE) == 300.0 and back.speed(SMALL) == 420.0
    assert back.lasted_s == 3.0 and back.total_s == 7.0


def test_a_windows_link_rate_is_the_median_of_what_its_workers_measured() -> None:
    obs = observation(Config(), 100.0, 0, workers=2)
    assert dataclasses.replace(obs, bandwidth_up=(1e8, 0.0), bandwidth_down=(3e8, 2e8)
                               ).link_rate == 2e8
    assert dataclasses.replace(obs, bandwidth_up=(0.0, 0.0), bandwidth_down=(0.0, 0.0)
                               ).link_rate is None
