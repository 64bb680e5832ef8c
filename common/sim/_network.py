"""Shared-resource models of one representative worker's communication.

Workers are symmetric in data-parallel training, so the simulator follows one worker's
scheduler and charges each chunk to the resources it shares with the others. Every resource is
a FIFO: it serves chunks in the order the scheduler started them, and a reservation is made
when the chunk starts (so a started chunk is never overtaken: the price of a large credit).

- ``cpu``: the per-chunk fixed ``overhead_s`` (issuing a chunk in the scheduler and the engine)
  is serial on the worker, before the chunk reaches the network.
- Ring all-reduce: every link carries ``2(n-1)/n`` of the chunk's bytes; a chunk pays
  ``latency_s`` per ring hop, ``2(n-1)`` hops (reduce-scatter then all-gather). Latency is
  pipelined (it does not hold the link), so a credit of several chunks hides it.
- Parameter server with ``s`` servers: chunks go to servers round-robin in forward order. A
  push needs the worker's uplink for its bytes and the server's downlink for the bytes of all
  ``n`` workers (they push the same chunk at the same time, each at 1/n of the server's link);
  it is complete when both are done. The two are reserved independently, so a busy server never
  blocks the worker's pushes to the others (separate connections). The pull is reserved when
  the push completes (plus ``latency_s``), the same way on the server's uplink and the worker's
  downlink, so both serve pulls in the order the pushes finished. A chunk holds its credit
  until its pull is back. Servers' links follow the same bandwidth schedule as the workers'.
"""

from __future__ import annotations

from collections.abc import Callable

from common.sim._bandwidth import BandwidthSchedule
from common.stats import comm_factor

__all__ = ["Transfer", "allreduce_model", "ps_model"]

# (nbytes, start time, server index) -> time the chunk's communication is complete
Transfer = Callable[[int, float, int], float]


def allreduce_model(*, workers: int, bandwidth: BandwidthSchedule, overhead_s: float,
                    latency_s: float) -> Transfer:
    bits_per_byte = 8.0 * comm_factor("allreduce", workers, 1)
    hops_latency = 2 * (workers - 1) * latency_s
    finish = bandwidth.finish
    constant = bandwidth.is_constant
    per_byte = bits_per_byte / bandwidth.peak_rate
    cpu_free = link_free = 0.0

    def transfer(nbytes: int, t: float, server: int) -> float:
        nonlocal cpu_free, link_free
        issued = (t if t > cpu_free else cpu_free) + overhead_s
        cpu_free = issued
        begin = issued if issued > link_free else link_free
        link_free = (begin + nbytes * per_byte if constant
                     else finish(begin, nbytes * bits_per_byte))
        return link_free + hops_latency

    return transfer


def ps_model(*, workers: int, servers: int, bandwidth: BandwidthSchedule, overhead_s: float,
             latency_s: float) -> tuple[Transfer, Transfer]:
    """(push, pull): ``push`` at the chunk's start returns when its push is complete;
    ``pull`` at that time returns when the chunk is back."""
    finish = bandwidth.finish
    n = float(workers)
    cpu_free = up_free = down_free = 0.0
    server_in = [0.0] * servers
    server_out = [0.0] * servers

    def push(nbytes: int, t: float, server: int) -> float:
        nonlocal cpu_free, up_free
        bits = 8.0 * nbytes
        issued = (t if t > cpu_free else cpu_free) + overhead_s
        cpu_free = issued
        up_free = finish(max(issued, up_free), bits)
        arrived = server_in[server] = finish(max(issued, server_in[server]), n * bits)
        return max(up_free, arrived) + latency_s

    def pull(nbytes: int, t: float, server: int) -> float:
        nonlocal down_free
        bits = 8.0 * nbytes
        down_free = finish(max(t, down_free), bits)
        sent = server_out[server] = finish(max(t, server_out[server]), n * bits)
        return max(down_free, sent) + latency_s

    return push, pull
