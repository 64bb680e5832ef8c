"""A tiny bounded TCP sender/receiver to measure what a testbed link really carries.

Run as ``python -m common.testbed._probe recv ADDR PORT SECONDS`` in one host's namespace and
``... send ADDR PORT SECONDS`` in another. The receiver prints one JSON line: the wall-clock
arrival time of every 64 KiB-ish read, bucketed into 50 ms bins, so callers can compute the
average rate and see when a rate change took effect. Both ends stop by themselves.

``message-recv ADDR PORT NBYTES`` and ``message-send ADDR PORT NBYTES``: after a warm-up
message and an idle pause, one message of NBYTES; each end prints when it began sending or
finished receiving it (one clock: the hosts share the machine's), so callers see whether a
link passes a burst after a pause faster than its rate.
"""

from __future__ import annotations

import json
import socket
import sys
import time

BIN_S = 0.05
PAUSE_S = 0.5  # idle before the message: any token bucket is full again
_CHUNK = 1 << 20
_WARMUP_BYTES = 64 * 1024


def _accept(address: str, port: int) -> socket.socket:
    """Listen, say "ready" (the caller starts the sender then), take one connection."""
    with socket.create_server((address, port), reuse_port=False) as server:
        server.settimeout(10.0)
        print("ready", flush=True)
        return server.accept()[0]


def receive(address: str, port: int, seconds: float) -> dict[str, object]:
    bins: dict[int, int] = {}
    with _accept(address, port) as conn:
        conn.settimeout(seconds + 10.0)
        start = time.time()
        first = last = 0.0
        total = 0
        while True:
            data = conn.recv(_CHUNK)
            now = time.time()
            if not data:
                break
            if not total:
                first = now
            last = now
            total += len(data)
            key = int((now - start) / BIN_S)
            bins[key] = bins.get(key, 0) + len(data)
            if now - start > seconds + 5.0:
                break
    return {"start": start, "first": first, "last": last, "bytes": total, "bin_s": BIN_S,
            "bins": [bins.get(i, 0) for i in range(max(bins, default=-1) + 1)]}


def send(address: str, port: int, seconds: float) -> int:
    payload = b"\0" * _CHUNK
    deadline = time.monotonic() + seconds
    sent = 0
    with socket.create_connection((address, port), timeout=10.0) as conn:
        while time.monotonic() < deadline:
            conn.sendall(payload)
            sent += len(payload)
    return sent


def receive_message(address: str, port: int, nbytes: int) -> dict[str, float]:
    with _accept(address, port) as conn:
        conn.settimeout(30.0)
        for size in (_WARMUP_BYTES, nbytes):
            left = size
            while left:
                data = conn.recv(min(left, _CHUNK))
                if not data:
                    raise ConnectionError(f"sender closed with {left} of {size} bytes unsent")
                left -= len(data)
            done = time.time()
            conn.sendall(b"\1")
    return {"done": done}


def send_message(address: str, port: int, nbytes: int) -> dict[str, float]:
    with socket.create_connection((address, port), timeout=10.0) as conn:
        conn.sendall(b"\0" * _WARMUP_BYTES)
        conn.recv(1)
        time.sleep(PAUSE_S)
        start = time.time()
        conn.sendall(b"\0" * nbytes)
        conn.recv(1)
    return {"start": start}


_MODES = {"send": (send, float), "recv": (receive, float),
          "message-send": (send_message, int), "message-recv": (receive_message, int)}


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in _MODES:
        print(f"usage: python -m common.testbed._probe {'|'.join(_MODES)} ADDRESS PORT "
              "SECONDS|NBYTES", file=sys.stderr)
        return 2
    (run, kind), address, port = _MODES[argv[0]], argv[1], int(argv[2])
    result = run(address, port, kind(argv[3]))
    if argv[0] != "send":
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
