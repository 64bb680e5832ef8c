"""Runtime statistics for the tuner (the AutoByte paper's Table II), per worker and per window.

Adapters normally use ``common.control.TuningAgent``, which owns a collector. Direct use::

    collector = StatsCollector(rank=r, num_workers=n, config=cfg, model="resnet50",
                               arch="ps", on_window=send)
    collector.set_layer_bytes(grad_bytes_in_forward_order)        # once
    collector.record_step(step, batch, dt, layer_backward_s=times_or_None,
                          bytes_up=up, bytes_down=down)          # every step, cheap
    collector.set_config(new_cfg, step=s)                         # when a switch is applied

``Window.to_dict``/``from_dict`` is the versioned JSON form sent to the coordinator, which
combines one window of all workers with ``merge_windows`` into an ``Observation``.
"""

from common.stats._collector import StatsCollector, busy_time, comm_factor
from common.stats._layers import (
    backward_times,
    layers_by_block,
    layers_by_rank,
    per_layer,
    ring_bytes,
)
from common.stats._observation import OBSERVATION_VERSION, Observation, merge_windows
from common.stats._sampling import AHEAD_SETTLE_S, SAMPLE_INTERVAL_S, STEP_SHIFT, SampleBudget
from common.stats._summary import TrainingStats
from common.stats._window import ARCHITECTURES, WINDOW_SCHEMA, WINDOW_VERSION, Window

__all__ = [
    "AHEAD_SETTLE_S",
    "ARCHITECTURES",
    "OBSERVATION_VERSION",
    "SAMPLE_INTERVAL_S",
    "STEP_SHIFT",
    "WINDOW_SCHEMA",
    "WINDOW_VERSION",
    "Observation",
    "SampleBudget",
    "StatsCollector",
    "TrainingStats",
    "Window",
    "backward_times",
    "busy_time",
    "comm_factor",
    "layers_by_block",
    "layers_by_rank",
    "merge_windows",
    "per_layer",
    "ring_bytes",
]
