"""Windows: bucketing, Table II features, JSON round trip, validation, merging."""

from __future__ import annotations

import dataclasses
import json

import pytest

from common.config import Config
from common.errors import ConfigError, ControlError
from common.stats import (
    AHEAD_SETTLE_S,
    Observation,
    SampleBudget,
    StatsCollector,
    Window,
    busy_time,
    merge_windows,
)


def _collect(rank: int = 0, num_workers: int = 2, steps: range = range(20), *,
             config: Config | None = None, warmup: int = 0) -> list[Window]:
    out: list[Window] = []
    c = StatsCollector(rank=rank, num_workers=num_workers, config=config or Config(),
                       model="resnet50", arch="ps", window_steps=10,
                       warmup_after_change=warmup, on_window=out.append)
    c.set_layer_bytes([400, 800, 1200])
    for s in steps:
        c.record_step(s, 32, 0.1 * (rank + 1), layer_backward_s=[0.01, 0.02, 0.03],
                      bytes_up=1000, bytes_down=2000)
    c.flush()
    return out


def test_windows_are_aligned_buckets_with_table_ii_features() -> None:
    windows = _collect(rank=1)
    assert [(w.first_step, w.last_step, w.steps) for w in windows] == [(0, 9, 10), (10, 19, 10)]
    w = windows[0]
    assert w.speed == pytest.approx(32 / 0.2)
    assert (w.partition_bytes, w.credit_bytes, w.num_workers, w.num_layers) == (
        Config().partition_bytes, Config().credit_bytes, 2, 3)
    assert (w.model, w.arch) == ("resnet50", "ps")
    assert w.layer_backward_s == pytest.approx((0.01, 0.02, 0.03))
    assert w.layer_bytes == (400, 800, 1200)
    assert w.bandwidth_up == pytest.approx(8 * 10_000 / 2.0)
    assert w.bandwidth_down == pytest.approx(8 * 20_000 / 2.0)


def test_start_mid_bucket_and_flush_gives_partial_windows() -> None:
    windows = _collect(steps=range(5, 23))
    assert [(w.first_step, w.last_step) for w in windows] == [(5, 9), (10, 19), (20, 22)]


def test_config_change_closes_window_and_warmup_is_excluded() -> None:
    out: list[Window] = []
    c = StatsCollector(rank=0, num_workers=1, config=Config(), window_steps=10,
                       on_window=out.append)
    for s in range(10):
        c.record_step(s, 10, 5.0 if s == 0 else 1.0)
    new = Config(partition_bytes="512KiB", credit_bytes="1MiB")
    for s in range(10, 14):
        c.record_step(s, 10, 1.0)
    c.set_config(new, step=14)
    for s in range(14, 20):
        c.record_step(s, 10, 9.0 if s == 14 else 2.0)
    assert [(w.first_step, w.steps, w.warmup_steps) for w in out] == [(0, 9, 1), (10, 4, 0),
                                                                      (14, 5, 1)]
    assert out[0].speed == pytest.approx(10.0)
    assert out[2].config == new and out[2].speed == pytest.approx(5.0)
    assert out[2].step_time_max_s == 2.0


def test_summary_gives_totals_and_the_latest_windows_rates() -> None:
    """What a user reads (``TrainingStats``): steps and warm-up so far, the rates of the open
    window once it has a measured step, else of the last closed one."""
    c = StatsCollector(rank=0, num_workers=1, config=Config(), window_steps=10)
    empty = c.summary()
    assert (empty.steps, empty.window, empty.layer_backward_s) == (0, 0, None)
    c.set_layer_bytes([100, 300])
    for s in range(12):
        c.record_step(s, 10, 5.0 if s == 0 else 1.0, bytes_up=400,
                      layer_backward_s=[0.1, 0.3] if s == 3 else None)
    new = Config(partition_bytes="512KiB", credit_bytes="1MiB")
    c.set_config(new, step=12)
    closed = c.summary()  # the open window is empty: steps 10-11 are the latest measured
    assert (closed.steps, closed.window, closed.warmup_steps, closed.warmup_s) == (12, 2, 1, 5.0)
    assert closed.samples_per_s == pytest.approx(10.0) and closed.config == new
    assert closed.bytes_per_s == pytest.approx(400.0)
    # none sampled in the latest window: the last window's that had a sampled step
    assert closed.layer_backward_s == pytest.approx((0.1, 0.3))
    assert (closed.layer_bytes, closed.sampled_steps) == ((100, 300), 1)
    c.record_step(12, 10, 8.0)  # warm-up after the switch
    c.record_step(13, 20, 2.0, layer_backward_s=[0.2, 0.2])
    open_ = c.summary()
    assert (open_.steps, open_.window, open_.warmup_steps, open_.sampled_steps) == (14, 1, 2, 2)
    assert open_.step_time_s == pytest.approx(2.0) and open_.samples_per_s == pytest.approx(10.0)
    assert open_.layer_backward_s == pytest.approx((0.2, 0.2))


def test_the_job_end_travels_in_every_window_and_the_merge_keeps_the_known_one() -> None:
    c = StatsCollector(rank=0, num_workers=2, config=Config(), window_steps=5)
    d = StatsCollector(rank=1, num_workers=2, config=Config(), window_steps=5)
    c.set_end_step(500)
    with pytest.raises(ConfigError, match="step=-1"):
        c.set_end_step(-1)
    for s in range(5):
        c.record_step(s, 8, 0.1)
        d.record_step(s, 8, 0.1)
    w0, w1 = c._last_window, d._last_window  # step 4 closed each one
    assert w0 is not None and w1 is not None
    assert (w0.end_step, w1.end_step) == (500, 0)
    assert Window.from_dict(json.loads(json.dumps(w0.to_dict()))).end_step == 500
    obs = merge_windows([w0, w1])
    assert obs.end_step == 500
    assert Observation.from_dict(json.loads(json.dumps(obs.to_dict()))).end_step == 500


def test_layer_times_only_from_sampled_steps() -> None:
    out: list[Window] = []
    c = StatsCollector(rank=0, num_workers=1, config=Config(), window_steps=4,
                       warmup_after_change=0, on_window=out.append)
    c.record_step(0, 1, 0.1, layer_backward_s=[1.0, 3.0])
    c.record_step(1, 1, 0.1)
    c.record_step(2, 1, 0.1, layer_backward_s=[3.0, 5.0])
    c.record_step(3, 1, 0.1)
    c.record_step(4, 1, 0.1)
    c.flush()
    assert out[0].layer_backward_s == pytest.approx((2.0, 4.0)) and out[0].layer_steps == 2
    assert out[1].layer_backward_s == () and out[1].layer_steps == 0


def test_json_round_trip() -> None:
    w = _collect()[0]
    text = json.dumps(w.to_dict())
    back = Window.from_dict(json.loads(text))
    assert back == w
    assert json.loads(text)["version"] == 1


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(version=99),
    lambda d: d.pop("samples"),
    lambda d: d.update(samples="many"),
    lambda d: d.update(elapsed_s=float("nan")),
    lambda d: d.update(arch="ring"),
    lambda d: d.update(rank=5),
    lambda d: d["config"].update(partition_bytes=-1),
    lambda d: d["config"].update(evil=1),
])
def test_malformed_window_is_rejected(mutate) -> None:  # type: ignore[no-untyped-def]
    d = json.loads(json.dumps(_collect()[0].to_dict()))
    mutate(d)
    with pytest.raises(ControlError):
        Window.from_dict(d)


def test_merge_gives_per_worker_rows_in_rank_order() -> None:
    w0 = _collect(rank=0)[0]
    w1 = _collect(rank=1)[0]
    obs = merge_windows([w1, w0])
    assert obs.ranks == (0, 1) and obs.complete
    assert obs.speed_per_worker == pytest.approx((320.0, 160.0))
    assert obs.speed == pytest.approx(480.0)
    assert obs.step_time_s == pytest.approx(0.2)
    assert obs.samples_per_step == pytest.approx(64.0)
    assert len(obs.layer_backward_s) == 2 and obs.num_layers == 3
    assert Observation.from_dict(json.loads(json.dumps(obs.to_dict()))) == obs


def test_merge_refuses_disagreeing_windows() -> None:
    w0 = _collect(rank=0)[0]
    w1 = _collect(rank=1, config=Config(partition_bytes="64KiB", credit_bytes="64KiB"))[0]
    with pytest.raises(ControlError, match="disagree on config"):
        merge_windows([w0, w1])
    with pytest.raises(ControlError, match="same worker"):
        merge_windows([w0, w0])


def test_bad_collector_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="rank=3"):
        StatsCollector(rank=3, num_workers=2, config=Config())
    with pytest.raises(ValueError, match="arch='ring'"):
        StatsCollector(rank=0, num_workers=1, config=Config(), arch="ring")


@pytest.mark.parametrize(("field", "value"), [
    ("layer_backward_s", ["0.1", "0.2"]),
    ("layer_backward_s", [[0.1], [0.2]]),
    ("layer_backward_s", [0.1, float("inf")]),
    ("layer_backward_s", [True, False]),
    ("layer_backward_s", "0.1"),
    ("layer_bytes", [1.5, 2.0]),
    ("layer_bytes", [-1, 2]),
    ("layer_bytes", [1, "2"]),
])
def test_malformed_layer_lists_are_rejected(field: str, value: object) -> None:
    d = json.loads(json.dumps(_collect()[0].to_dict()))
    d[field] = value
    with pytest.raises(ControlError, match=field):
        Window.from_dict(d)


def test_observation_from_an_older_dict_without_samples_per_step() -> None:
    obs = merge_windows([_collect(rank=0)[0], _collect(rank=1)[0]])
    data = obs.to_dict()
    del data["samples_per_step"]
    assert Observation.from_dict(data).samples_per_step == 0.0


def test_bad_numbers_from_the_adapter_drop_a_window_not_the_job() -> None:
    out: list[Window] = []
    c = StatsCollector(rank=0, num_workers=1, config=Config(), window_steps=2,
                       warmup_after_change=0, on_window=out.append)
    c.record_step(0, 1, float("nan"))
    c.record_step(1, 1, 0.1)
    c.record_step(2, 1, 0.1, layer_backward_s=[float("nan"), 0.1])
    c.record_step(3, 1, 0.1)
    assert [w.first_step for w in out] == [2]
    assert out[0].layer_backward_s == () and out[0].layer_steps == 1


def test_a_step_the_adapter_marks_as_warmup_is_left_out_of_the_speed() -> None:
    out: list[Window] = []
    c = StatsCollector(rank=0, num_workers=1, config=Config(window_steps=4),
                       warmup_after_change=0, on_window=out.append)
    for s, (dt, traced) in enumerate([(3.0, True), (1.0, False), (2.5, True), (1.0, False)]):
        c.record_step(s, 8, dt, warmup=traced)
    (w,) = out
    assert (w.steps, w.warmup_steps, w.elapsed_s, w.samples) == (2, 2, 2.0, 16)
    assert w.warmup_s == 5.5 and Window.from_dict(w.to_dict()).warmup_s == 5.5
    # the merged window keeps the slowest worker's warm-up: what the job waited for
    other = dataclasses.replace(w, rank=1, num_workers=2, warmup_steps=1, warmup_s=7.0)
    merged = merge_windows([dataclasses.replace(w, num_workers=2), other])
    assert (merged.warmup_steps, merged.warmup_s) == (2, 7.0)
    assert Observation.from_dict(merged.to_dict()).warmup_s == 7.0


def test_busy_time_is_the_union_of_the_transfer_intervals() -> None:
    assert busy_time([]) == 0.0
    assert busy_time([(0.0, 1.0), (0.5, 1.5), (3.0, 4.0), (3.2, 3.8)]) == pytest.approx(2.5)


def test_link_rate_is_of_the_steps_that_timed_the_link_and_none_when_no_step_did() -> None:
    """Adapters time their links on sampled steps only: a window's rate is those steps' bytes
    over their busy time; a later window without one has no rate (a carried one would hide a
    link change); an adapter that never times its link reads bytes over step time."""
    out: list[Window] = []
    c = StatsCollector(rank=0, num_workers=1, config=Config(), window_steps=4,
                       warmup_after_change=0, on_window=out.append)
    for s in range(12):
        timed = s in (1, 2)
        c.record_step(s, 8, 0.1, bytes_up=1000, bytes_down=1000, comm_s=0.02 if timed else 0.0)
    assert [w.bandwidth_up for w in out] == pytest.approx([8 * 2000 / 0.04, 0.0, 0.0])
    assert [w.bytes_up for w in out] == [4000] * 3  # every step's bytes still count
    assert c.summary().bytes_per_s == pytest.approx(1000 / 0.1)
    untimed = _collect()  # no comm_s at all
    assert untimed[0].bandwidth_up == pytest.approx(8 * 10_000 / 1.0)


def test_sample_budget_samples_at_a_change_and_while_settling_else_once_a_second() -> None:
    """A change (the configuration, or a step time 1.5-fold off the last check's, as a link
    change makes it) samples, and with ``settle_s`` (an adapter deciding a window ahead) every
    window that long after it, so the tuner sees the new link's rate; else once
    ``SAMPLE_INTERVAL_S``."""
    now = [0.0]
    budget = SampleBudget(settle_s=AHEAD_SETTLE_S, clock=lambda: now[0])
    config = Config()

    def windows(seconds: float, step_s: float, every_s: float = 0.5) -> list[bool]:
        out = []
        for _ in range(round(seconds / every_s)):
            now[0] += every_s
            budget.stepped(step_s)
            out.append(budget.due(config))
        return out

    assert windows(3.0, 0.05) == [True] * 6  # the first check is a change: 3 s unsettled
    # 3.0 s after the change still settles, then once a second (10% is noise, not a change)
    assert windows(3.0, 0.055) == [True, False] * 3
    assert windows(1.0, 0.1) == [True, True]  # the step time doubled: settling again
    assert windows(2.0, 0.1) == [True] * 4
    assert windows(2.0, 0.1) == [True, False] * 2
    budget.note(config.replace(partition_bytes="64KiB"))  # a switch: unsettled from now
    assert windows(1.0, 0.1, every_s=0.25) == [True] * 4
    assert budget.due(config)  # back to the first configuration (no step time: no shift)
    within = SampleBudget(clock=lambda: now[0])  # deciding in the window itself: no settling
    checks = []
    for step_s in (0.05, 0.05, 0.05, 0.05, 0.1, 0.1, 0.1, 0.1):
        now[0] += 0.5
        within.stepped(step_s)
        checks.append(within.due(config))
    assert checks == [True, False, True, False, True, False, True, False]
