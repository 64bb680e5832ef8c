"""Pinned listen ports that do not collide, also between jobs sharing one testbed.

Ports come from 20000-31999, below Linux's ephemeral range (32768+), so a job's own outgoing
connections never occupy a port another job is about to bind. Each port is checked free on
this machine by binding it; for jobs inside namespaces (or remote hosts) the probe sockets are
held until the job ends, so concurrent launches on this machine never hand out the same port.
On loopback the job itself must bind them, so they are released right before it starts.
"""

from __future__ import annotations

import contextlib
import random
import socket

from common.errors import LaunchError

__all__ = ["PortReservation", "reserve_ports"]

LOW, HIGH = 20000, 32000
_held: set[int] = set()


class PortReservation:
    """``ports`` reserved on this machine until ``release()``."""

    def __init__(self, ports: list[int], sockets: list[socket.socket]) -> None:
        self.ports = ports
        self._sockets = sockets

    def release(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []
        _held.difference_update(self.ports)


def reserve_ports(count: int, *, rng: random.Random | None = None) -> PortReservation:
    """Reserve ``count`` distinct free TCP ports (on all addresses of this machine)."""
    rng = rng or random.Random()
    ports: list[int] = []
    sockets: list[socket.socket] = []
    for _ in range(50 * count + 100):
        if len(ports) == count:
            break
        port = rng.randrange(LOW, HIGH)
        if port in _held or port in ports:
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            sock.close()
            continue
        ports.append(port)
        sockets.append(sock)
    if len(ports) < count:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        raise LaunchError(f"could not find {count} free ports in {LOW}-{HIGH - 1}")
    _held.update(ports)
    return PortReservation(ports, sockets)
