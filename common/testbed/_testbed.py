"""An emulated cluster on one machine: N hosts on one shaped switch.

Layout (as root): one switch namespace ``<name>-sw`` holding bridge ``br0``; host *i* is
namespace ``<name>-h<i>`` with interface ``eth0`` (address ``<subnet>.<250-i>``), joined to
switch port ``p<i>`` by a veth pair. Links live only inside the testbed's own namespaces, so
the root namespace is never touched and short fixed interface names cannot collide. Upload is
shaped on ``eth0`` egress, download on ``p<i>`` egress (tbf, with a bucket as shallow as a
GSO packet: ``_net.shape``), each host independently.

Without root (or without ``ip``/``tc``) the testbed falls back to loopback: every host is
127.0.0.1, ``shaped`` is False and ``set_rate`` only warns, so the same job still runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import secrets
import string
import threading
import warnings
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from common.errors import ConfigError, TestbedError
from common.testbed import _lifecycle, _net, _registry
from common.testbed._schedule import RateStep, ScheduleRunner, parse_schedule
from common.testbed._values import (
    DEFAULT_BASE,
    default_base,
    host_address,
    parse_seconds,
    rate_or_none,
)
from common.units import format_rate

__all__ = ["DEFAULT_BASE", "MAX_HOSTS", "Host", "Testbed"]

log = logging.getLogger(__name__)

MAX_HOSTS = 150
LOOPBACK = "127.0.0.1"
HOST_DEV = "eth0"
_ALPHABET = string.ascii_lowercase + string.digits


def _euid() -> int:
    """Indirection so unit tests can simulate a non-root user."""
    return os.geteuid()


@dataclasses.dataclass(frozen=True)
class Host:
    """One emulated host: ``netns`` is None on loopback."""

    name: str
    address: str
    netns: str | None
    index: int


class Testbed:
    """N emulated hosts with shaped links; a context manager that always cleans up.

    ``rate`` sets upload and download of every host; ``up``/``down`` override one direction.
    ``latency`` (seconds or "5ms") and ``loss`` (percent) are added on each host's upload with
    netem, so host-to-host one-way delay is ``latency``. ``prefix`` names the namespaces
    (default: ``abt`` or AUTOBYTE_TESTBED_PREFIX, plus 5 random characters: unique per
    testbed; leftovers of crashed runs with the same base are swept at start).
    ``persistent`` testbeds (``autobyte testbed up``) outlive this process until
    ``autobyte testbed down``.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, *, hosts: int, rate: float | str | None = None,
                 up: float | str | None = None, down: float | str | None = None,
                 latency: float | str | None = None, loss: float | None = None,
                 prefix: str | None = None, persistent: bool = False) -> None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= MAX_HOSTS:
            raise ConfigError(f"hosts must be an int between 1 and {MAX_HOSTS}, got {hosts=}")
        if prefix is not None and not _registry.NAME_RE.match(prefix):
            raise ConfigError("prefix must be 2-10 lowercase letters/digits starting with a "
                              f"letter (it names namespaces), got {prefix=}")
        if loss is not None and (isinstance(loss, bool) or not 0 <= float(loss) <= 100):
            raise ConfigError(f"loss must be a percentage between 0 and 100, got {loss=}")
        base_up = rate_or_none(rate, "rate")
        self.latency = parse_seconds(latency, "latency")
        self.loss = None if loss is None else float(loss)
        self._up_rate = rate_or_none(up, "up") or base_up
        self._down_rate = rate_or_none(down, "down") or base_up
        self.persistent = persistent
        self.owned = True
        self._lock = threading.RLock()
        self._runners: list[ScheduleRunner] = []
        self._closed = False
        self.name = prefix or ""
        self.subnet = ""
        self.hosts: list[Host] = []
        self._rates: list[tuple[float | None, float | None]] = []
        reason = self._why_not_shaped()
        self.shaped = reason is None
        if reason is not None:
            self._loopback(hosts, reason)
            return
        _lifecycle.register(self)
        try:
            self._create(hosts, prefix)
        except BaseException:
            self.close()
            raise

    # ---- construction -------------------------------------------------------------------

    @staticmethod
    def _why_not_shaped() -> str | None:
        if _euid() != 0:
            return (f"not running as root (euid={_euid()}): network namespaces and tc need "
                    "root")
        missing = _net.have_tools()
        if missing:
            return f"missing system tools {missing} (apt-get install iproute2)"
        return None

    def _loopback(self, count: int, reason: str) -> None:
        message = (f"AutoByte testbed: {reason}; falling back to plain loopback: all {count} "
                   f"hosts are {LOOPBACK} and links are NOT shaped (run as root for emulated, "
                   "shaped links)")
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        self.name = self.name or "loopback"
        self.hosts = [Host(f"h{i}", LOOPBACK, None, i) for i in range(count)]
        self._rates = [(None, None)] * count

    def _pick_name(self, prefix: str | None) -> str:
        existing = set(_net.list_netns())
        if prefix is not None:
            record_file = _registry.record_path(prefix)
            if record_file.exists() and _registry.owner_alive(_registry.read_record(prefix)):
                raise TestbedError(f"testbed {prefix!r} is in use by a running process; "
                                   "choose another prefix or run `autobyte testbed down "
                                   f"{prefix}`")
            _registry.destroy(prefix)
            if not _registry.claim(prefix):
                raise TestbedError(f"testbed {prefix!r} was just taken by another process")
            return prefix
        while True:
            name = default_base() + "".join(secrets.choice(_ALPHABET) for _ in range(5))
            clash = any(ns.startswith(name + "-") for ns in existing)
            if not clash and _registry.claim(name):
                return name

    def _pick_subnet(self) -> str:
        """A /24 in 10.200.0.0/13 derived from the name, skipping ones live testbeds use."""
        used = {r.get("subnet") for r in _registry.records()}
        seed = int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:4], "big")
        for probe in range(8 * 256):
            slot = (seed + probe) % (8 * 256)
            subnet = f"10.{200 + slot // 256}.{slot % 256}"
            if subnet not in used:
                return subnet
        raise TestbedError("no free /24 left in 10.200.0.0/13 for another testbed")

    def _record(self) -> dict[str, Any]:
        return {
            "name": self.name, "subnet": self.subnet, "persistent": self.persistent,
            "owner_pid": os.getpid(), "owner_start": _registry.process_start_time(os.getpid()),
            "latency": self.latency, "loss": self.loss,
            "hosts": [dataclasses.asdict(h) for h in self.hosts],
            "rates": [list(r) for r in self._rates],
        }

    def _create(self, count: int, prefix: str | None) -> None:
        # a named testbed clears crashed unnamed runs too (a killed `autobyte demo`)
        for base in dict.fromkeys(b for b in (default_base(), prefix) if b):
            _registry.sweep(base)
        self.name = self._pick_name(prefix)
        self.subnet = self._pick_subnet()
        self.hosts = [Host(f"h{i}", host_address(self.subnet, i), f"{self.name}-h{i}", i)
                      for i in range(count)]
        self._rates = [(self._up_rate, self._down_rate)] * count
        _registry.write_record(self._record())
        switch = self.switch_netns
        _net.run(["ip", "netns", "add", switch])
        _net.batch(switch, ["link set lo up", "link add br0 type bridge",
                            "link set br0 up"])
        for host in self.hosts:
            assert host.netns is not None
            _net.run(["ip", "netns", "add", host.netns])
            _net.batch(switch, [
                f"link add p{host.index} type veth peer name {HOST_DEV} netns {host.netns}",
                f"link set p{host.index} master br0",
                f"link set p{host.index} up",
            ])
            _net.batch(host.netns, ["link set lo up",
                                    f"addr add {host.address}/24 dev {HOST_DEV}",
                                    f"link set {HOST_DEV} gso_max_size {_net.GSO_MAX_BYTES}",
                                    f"link set {HOST_DEV} up"])
            self._apply(host.index)
        log.info("testbed %s up: %d hosts in %s.0/24, %s", self.name, count, self.subnet,
                 self.describe_rates())

    # ---- public API ---------------------------------------------------------------------

    @property
    def switch_netns(self) -> str:
        return f"{self.name}-sw"

    def host(self, host: Host | int | str) -> Host:
        """Look a host up by Host, index or name ("h1", its namespace or its address)."""
        if isinstance(host, Host):
            return self.hosts[host.index]
        if isinstance(host, int) and not isinstance(host, bool):
            if 0 <= host < len(self.hosts):
                return self.hosts[host]
        else:
            for h in self.hosts:
                if host == h.name or (h.netns is not None and host in (h.netns, h.address)):
                    return h
        names = [h.name for h in self.hosts]
        raise ConfigError(f"host must be an index 0..{len(self.hosts) - 1} or one of {names}, "
                          f"got host={host!r}")

    def wrap(self, host: Host | int | str, argv: Sequence[str]) -> list[str]:
        """``argv`` made to run inside ``host``'s namespace (unchanged on loopback)."""
        netns = self.host(host).netns
        return list(argv) if netns is None else ["ip", "netns", "exec", netns, *argv]

    def rates(self, host: Host | int | str) -> tuple[float | None, float | None]:
        """Current (upload, download) bit/s of ``host``; None means unshaped."""
        return self._rates[self.host(host).index]

    def set_rate(self, rate: float | str | None = None, *, up: float | str | None = None,
                 down: float | str | None = None, host: Host | int | str | None = None) -> None:
        """Change upload/download of one host (``host``) or all (None); takes effect at once."""
        if rate is None and up is None and down is None:
            raise ConfigError("set_rate needs rate, up or down (e.g. rate='1gbit')")
        new_up = rate_or_none(up if up is not None else rate, "up")
        new_down = rate_or_none(down if down is not None else rate, "down")
        targets = self.hosts if host is None else [self.host(host)]
        if not self.shaped:
            message = ("AutoByte testbed: set_rate ignored: the loopback fallback has no "
                       "shaped links (run as root)")
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return
        with self._lock:
            self._check_open()
            for h in targets:
                old_up, old_down = self._rates[h.index]
                self._rates[h.index] = (new_up or old_up, new_down or old_down)
                self._apply(h.index)
            if _registry.record_path(self.name).exists():
                record = _registry.read_record(self.name)
                record["rates"] = [list(r) for r in self._rates]
                _registry.write_record(record)

    def set_link(self, host: Host | int | str, *, up: bool) -> None:
        """Take ``host``'s switch port down (an outage: the host keeps its address, and its
        packets go nowhere until the port is up again) or back up."""
        h = self.host(host)
        if not self.shaped:
            raise ConfigError("set_link needs network namespaces: the loopback fallback has "
                              "no links to cut (run as root)")
        with self._lock:
            self._check_open()
            _net.batch(self.switch_netns, [f"link set p{h.index} {'up' if up else 'down'}"])

    def run_schedule(self, schedule: str | Sequence[RateStep], *,
                     host: Host | int | str | None = None,
                     repeat: bool = True) -> ScheduleRunner:
        """Start changing rates on a schedule ("10gbit:20,3gbit:20") in a background thread.

        Stop it with ``runner.stop()``; ``close()`` stops every runner too.
        """
        steps = parse_schedule(schedule) if isinstance(schedule, str) else tuple(schedule)
        runner = ScheduleRunner(
            apply=lambda step: self.set_rate(up=step.up, down=step.down, host=host),
            steps=steps, repeat=repeat)
        self._runners.append(runner)
        return runner.start()

    def describe_rates(self) -> str:
        def fmt(rate: float | None) -> str:
            return "unshaped" if rate is None else format_rate(rate)
        parts = {f"up {fmt(u)} down {fmt(d)}" for u, d in self._rates}
        extra = ""
        if self.latency:
            extra += f", latency {self.latency * 1e3:g}ms"
        if self.loss:
            extra += f", loss {self.loss:g}%"
        return (" | ".join(sorted(parts)) if len(parts) == 1 else "per host") + extra

    def describe(self) -> str:
        """A table of hosts, addresses, namespaces and rates (for logs and the CLI)."""
        lines = [f"testbed {self.name}: {len(self.hosts)} hosts, "
                 + ("shaped" if self.shaped else "loopback, NOT shaped")
                 + (f", subnet {self.subnet}.0/24" if self.subnet else "")
                 + (f", latency {self.latency * 1e3:g}ms" if self.latency else "")
                 + (f", loss {self.loss:g}%" if self.loss else "")]
        for h in self.hosts:
            up, down = self._rates[h.index]
            lines.append(f"  {h.name:<5} {h.address:<15} {h.netns or '-':<14} "
                         f"up {format_rate(up) if up else 'unshaped':<9} "
                         f"down {format_rate(down) if down else 'unshaped'}")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop schedules and, if this object owns the testbed, delete all its namespaces."""
        for runner in self._runners:
            runner.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _lifecycle.unregister(self)
        if not self.shaped or not self.owned or not self.name:
            return
        failed = _registry.destroy(self.name)
        if failed:
            raise TestbedError(f"testbed {self.name}: could not delete namespaces {failed}; "
                               f"run `autobyte testbed down {self.name}`")
        log.info("testbed %s down", self.name)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.close()
        except TestbedError as error:
            if exc is None:
                raise
            log.error("%s (while handling %r)", error, exc)  # keep the original error

    def __repr__(self) -> str:
        return (f"Testbed(name={self.name!r}, hosts={len(self.hosts)}, shaped={self.shaped}, "
                f"closed={self._closed})")

    # ---- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise TestbedError(f"testbed {self.name} is closed")

    def _apply(self, index: int) -> None:
        host = self.hosts[index]
        assert host.netns is not None
        up, down = self._rates[index]
        _net.shape(host.netns, HOST_DEV, rate=up, latency=self.latency, loss=self.loss)
        _net.shape(self.switch_netns, f"p{index}", rate=down)

    @classmethod
    def attach(cls, state: str) -> Testbed:
        """The testbed described by a state file or name, without taking ownership.

        Used by ``autobyte testbed rate|status`` and ``autobyte launch --testbed`` from another
        shell; ``close()`` on it leaves the namespaces in place.
        """
        record = _registry.read_record(state)
        self = cls.__new__(cls)
        self.name = str(record["name"])
        self.subnet = str(record["subnet"])
        self.latency = record.get("latency")
        self.loss = record.get("loss")
        self.persistent = bool(record.get("persistent"))
        self.owned = False
        self.shaped = True
        self._lock = threading.RLock()
        self._closed = False
        self._runners = []
        self.hosts = [Host(**h) for h in record["hosts"]]
        self._rates = [(r[0], r[1]) for r in record["rates"]]
        self._up_rate, self._down_rate = self._rates[0] if self._rates else (None, None)
        missing = set(filter(None, (h.netns for h in self.hosts))) - set(_net.list_netns())
        if missing:
            raise TestbedError(f"testbed {self.name} is gone (namespaces {sorted(missing)} "
                               "missing); bring it up again")
        return self
