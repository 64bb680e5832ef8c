"""Thin wrappers over ``ip`` and ``tc``: the only place that runs them.

Every command names its namespace explicitly (``ip -n NS``), so nothing ever touches the root
namespace. Failures raise :class:`TestbedError` with the command line and ``ip``/``tc``'s own
message, because that message is usually the fix ("Operation not permitted", "File exists").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

from common.errors import TestbedError

__all__ = [
    "BURST_MIN_BYTES",
    "BURST_S",
    "GSO_MAX_BYTES",
    "delete_netns",
    "have_tools",
    "list_netns",
    "netns_pids",
    "run",
    "shape",
]

GSO_MAX_BYTES = 16 * 1024
BURST_MIN_BYTES = GSO_MAX_BYTES * 3 // 2  # a GSO packet, its segments' headers and room
BURST_S = 0.001
_QUEUE_LATENCY = "100ms"
_TBF_HANDLE = "10:"


def have_tools() -> list[str]:
    """Names of missing system tools (``ip``, ``tc``); empty when all are present."""
    return [tool for tool in ("ip", "tc") if shutil.which(tool) is None]


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> str:
    """Run one command and return its stdout; raise TestbedError naming it on failure."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TestbedError(f"`{' '.join(argv)}` could not run: {exc}") from exc
    if check and proc.returncode != 0:
        raise TestbedError(
            f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def batch(netns: str, lines: Sequence[str]) -> None:
    """Run several ``ip`` commands inside one namespace in a single process (fast set-up)."""
    proc = subprocess.run(["ip", "-n", netns, "-batch", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise TestbedError(f"`ip -n {netns} -batch` failed: {proc.stderr.strip()}; "
                           f"commands: {list(lines)}")


def list_netns() -> list[str]:
    """Names of all network namespaces mounted under /run/netns."""
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(netns: str) -> list[int]:
    out = run(["ip", "netns", "pids", netns], check=False)
    return [int(tok) for tok in out.split() if tok.isdigit()]


def _kill_all(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def delete_netns(netns: str, *, grace: float = 2.0) -> None:
    """Stop every process still inside ``netns`` (SIGTERM, then SIGKILL), then delete it.

    Deleting a namespace only unmounts its name: processes left inside would keep it (and its
    links) alive, so they go first.
    """
    pids = netns_pids(netns)
    if pids:
        _kill_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = netns_pids(netns)
        _kill_all(pids, signal.SIGKILL)
        deadline = time.monotonic() + grace
        while netns_pids(netns) and time.monotonic() < deadline:
            time.sleep(0.05)
    if netns in list_netns():
        run(["ip", "netns", "delete", netns])


def _tc(netns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", netns, "tc", *args]


def _burst(rate: float) -> int:
    """Token bucket depth: ``BURST_S`` of the rate, at least ``BURST_MIN_BYTES``, which holds a
    GSO packet (hosts send at most ``GSO_MAX_BYTES``; one queued when the rate drops, larger
    than the new bucket, would never leave and the flow would stall). A real port sends nothing
    above its rate, while a deep bucket lets a message after a pause through at the veth's
    speed: 256 KiB, 21 ms of a 100 Mbit/s link, made native MXNet ResNet-20 run 1.16x faster
    than this bucket does and put PS plans that send one block at a time above native
    (docs/bench, session 61)."""
    return max(BURST_MIN_BYTES, int(rate / 8 * BURST_S))


def shape(netns: str, dev: str, *, rate: float | None, latency: float | None = None,
          loss: float | None = None) -> None:
    """Set ``dev``'s egress to ``rate`` bit/s (tbf) with optional netem delay (s) and loss (%).

    ``rate=None`` removes the rate limit. ``replace`` both adds and changes, so the same call
    sets up a link and changes it while traffic flows (takes effect at once).
    """
    if latency or loss:
        netem = ["netem", "limit", "100000"]
        if latency:
            netem += ["delay", f"{latency * 1e6:.0f}us"]
        if loss:
            netem += ["loss", f"{loss:g}%"]
        try:
            run(_tc(netns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", *netem))
        except TestbedError as exc:
            if "unknown" in str(exc).lower():
                raise TestbedError(
                    "latency and loss need the netem qdisc, which this kernel does not provide "
                    "(CONFIG_NET_SCH_NETEM is not set); rates work without it: leave latency "
                    "and loss unset") from exc
            raise
        parent = ["parent", "1:1"]
    else:
        parent = ["root"]
    if rate is None:
        if parent == ["root"]:
            run(_tc(netns, "qdisc", "del", "dev", dev, "root"), check=False)
        return
    run(_tc(netns, "qdisc", "replace", "dev", dev, *parent, "handle", _TBF_HANDLE, "tbf",
            "rate", f"{int(rate)}bit", "burst", str(_burst(rate)), "latency", _QUEUE_LATENCY))
