"""Live tuning: the kvstore's finished steps go to ``common.control.TuningAgent``; its
decisions come back through the step agreement (``_control``).

``Tuning.step`` runs on the training thread once per finished step, so it does a few
attribute reads and one ``record_step``. Per-tensor timing (an engine callback when each
gradient is ready, and with scheduling off one when each transfer ends) runs only on sampled
steps: the last step of a window, when ``common.stats.SampleBudget`` allows (when the
configuration is new or the step time moved, else at most one a second). Windows without one
carry no layer times, and on the native path no link rate: the tuner keeps the last ones it
saw. A worker decides alone, since nothing it sends depends on it; deciding at the window's
last step, it sees a change within the window itself.

The configuration a step ran with travels with the step, so the agent is told about a switch
exactly when the first step of the new configuration is fed: steps finish (all their blocks
done) after the next step has begun, so telling it when the switch is applied would file the
old configuration's last steps under the new one.

A step's time is the time between the moments the last blocks of two consecutive steps
finished. The time between two ``pushpull`` calls in Python is not it: Python only queues work
for MXNet's engine and, unless the training loop waits on a result, runs steps ahead.

Layers are Gluon blocks (``common.stats.layers_by_block``): a layer's weight and bias gradients
come out of one backward operator, so per-tensor gaps would be one real time and a zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from common.config import Config
from common.errors import ConfigError
from common.stats import SampleBudget, backward_times, layers_by_block, per_layer

__all__ = ["AgentLike", "Tuning"]


class AgentLike(Protocol):
    """The part of ``common.control.TuningAgent`` the kvstore uses."""

    def set_layer_bytes(self, layer_bytes: Sequence[int]) -> None: ...

    def record_step(self, step: int, samples: int, step_time_s: float, *,
                    layer_backward_s: Sequence[float] | npt.NDArray[np.float64] | None = None,
                    bytes_up: int = 0, bytes_down: int = 0, comm_s: float = 0.0,
                    warmup: bool = False) -> None: ...

    def set_config(self, config: Config, *, step: int) -> None: ...


class Tuning:
    """One kvstore's link to its ``TuningAgent`` (see the module docstring)."""

    __slots__ = ("_agent", "_budget", "_config", "_decided", "_index", "_last", "_layers",
                 "_link_factor", "_sample_every", "_signature")

    def __init__(self, agent: AgentLike, config: Config, *,
                 sample_every: int | None = None, link_factor: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if sample_every is not None and (isinstance(sample_every, bool) or
                                         not isinstance(sample_every, int) or sample_every < 1):
            raise ConfigError(f"sample_every must be an int >= 1 (steps), got "
                              f"sample_every={sample_every!r}")
        self._agent = agent
        self._config = config
        self._link_factor = link_factor  # common.stats.comm_factor of the job
        self._sample_every = sample_every  # None: a window's last step, time permitting
        self._budget = SampleBudget(clock=clock)  # deciding in the window itself: no settling
        self._decided = (0, False)  # (step, sampled) of the latest step asked about
        self._index: dict[str, int] = {}
        self._layers = 0
        self._signature: tuple[tuple[str, int], ...] = ()
        self._last: tuple[int, float] | None = None  # (step, when its last block finished)

    @property
    def agent(self) -> AgentLike:
        return self._agent

    def sampled(self, step: int, config: Config) -> bool:
        """Whether ``step``, run under ``config``, is timed per tensor (gradient-ready stamps;
        with scheduling off also each tensor's transfer); other steps are timed as a whole.
        With ``sample_every`` the last of every ``sample_every`` steps; by default the last
        step of a window (steps count from 1, so the job's first window, steps 1 to
        ``window_steps - 1``, has one too) when the ``SampleBudget`` allows. Decided once per
        step."""
        if step == self._decided[0]:
            return self._decided[1]
        every = self._sample_every or config.window_steps
        sample = step % every == every - 1
        if sample and self._sample_every is None:
            sample = self._budget.due(config)
        self._decided = (step, sample)
        return sample

    def set_layers(self, tensors: Sequence[tuple[str, int]]) -> None:
        """The gradients pushed every step, ``(name, nbytes)`` in forward order; tells the
        agent the bytes per layer whenever they change."""
        signature = tuple(tensors)
        if signature == self._signature:
            return
        self._signature = signature
        names = [name for name, _ in signature]
        layers = layers_by_block(names)
        self._index = dict(zip(names, layers, strict=True))
        layer_bytes = [int(b) for b in per_layer([float(n) for _, n in signature], layers)]
        self._layers = len(layer_bytes)
        self._agent.set_layer_bytes(layer_bytes)

    def step(self, step: int, config: Config, *, done: float, issue_s: float,
             samples: int | None, ready: Mapping[str, float], nbytes: int,
             comm_s: float = 0.0) -> None:
        """One finished step: ``done`` is when its last block finished (clock seconds, 0 when
        it had none), ``issue_s`` the Python time between its first pushpull and the next
        step's (used only without two consecutive completions), ``ready`` maps tensor names to
        gradient-ready times (same clock), ``nbytes`` is what this worker pushed (and pulled
        back) in it, ``comm_s`` the time its link was busy (the union of its blocks'
        transfer intervals), from which the agent's windows take their bandwidth: ``nbytes``
        times ``link_factor`` (``common.stats.comm_factor``: every worker's push crosses a
        server's link) over ``comm_s``, the rate of the link the transfers waited for.

        Without a batch size (plain kvstore use, no Trainer) a step counts as one sample, so
        the tuner compares steps per second.
        """
        last, self._last = self._last, (step, done) if done > 0.0 else None
        if last is not None and last[0] == step - 1 and done > last[1]:
            duration_s = done - last[1]
        else:
            duration_s = issue_s
        self._budget.stepped(duration_s)
        if config is not self._config and config != self._config:
            self._config = config
            self._agent.set_config(config, step=step)
        layer_times = None
        if ready and self._layers:  # only sampled steps stamp gradients
            layer_times = self.layer_times(ready)
        link_bytes = round(nbytes * self._link_factor)  # what the servers' links carry
        self._agent.record_step(step, samples or 1, duration_s, layer_backward_s=layer_times,
                                bytes_up=link_bytes, bytes_down=link_bytes, comm_s=comm_s)

    def layer_times(self, ready: Mapping[str, float]) -> npt.NDArray[np.float64] | None:
        """Backward seconds per layer, or None when some layer has no ready time this step
        (an array: the collector adds it in place, a list would be converted there)."""
        layer_ready = [float("-inf")] * self._layers
        index = self._index
        for name, t in ready.items():
            layer = index.get(name)
            if layer is not None and t > layer_ready[layer]:
                layer_ready[layer] = t  # a layer is done when its last gradient is
        if float("-inf") in layer_ready:
            return None
        return np.array(backward_times(layer_ready, from_start=False))
