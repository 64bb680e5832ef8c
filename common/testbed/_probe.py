"""A tiny bounded TCP sender/receiver to measure what a testbed link really carries.

Run as ``python -m common.testbed._probe recv ADDR PORT SECONDS`` in one host's namespace and
``... send ADDR PORT SECONDS`` in another. The receiver prints one JSON line: the wall-clock
arrival time of every 64 KiB-ish read, bucketed into 50 ms bins, so callers can compute the
average rate and see when a rate change took effect. Both ends stop by themselves.
"""

from __future__ import annotations

import json
import socket
import sys
import time

BIN_S = 0.05
_CHUNK = 1 << 20


def receive(address: str, port: int, seconds: float) -> dict[str, object]:
    with socket.create_server((address, port), reuse_port=False) as server:
        server.settimeout(10.0)
        print("ready", flush=True)
        conn, _ = server.accept()
    bins: dict[int, int] = {}
    with conn:
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


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in ("send", "recv"):
        print("usage: python -m common.testbed._probe send|recv ADDRESS PORT SECONDS",
              file=sys.stderr)
        return 2
    mode, address, port, seconds = argv[0], argv[1], int(argv[2]), float(argv[3])
    if mode == "recv":
        print(json.dumps(receive(address, port, seconds)), flush=True)
    else:
        send(address, port, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
