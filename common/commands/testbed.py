"""``autobyte testbed up|rate|status|down|bench``: an emulated cluster that outlives the shell.

Hosts are network namespaces on one switch with shaped links (tc), so a job on one machine sees
real TCP at the rates you set and can be slowed down mid-run. ``up`` creates a persistent
testbed and records it in /run/autobyte/<name>.json, so ``rate``, ``status``, ``down`` and
``autobyte launch --testbed <name>`` work from any other shell. Needs root; without it there is
only loopback, unshaped.

    autobyte testbed up --hosts 3 --rate 1gbit --name abt1
    autobyte testbed rate --testbed abt1 --rate 100mbit
    autobyte testbed down abt1
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

from common.errors import ConfigError, TestbedError
from common.testbed import MAX_HOSTS, Testbed, destroy, parse_schedule, parse_seconds, records
from common.testbed._registry import NAME_RE
from common.units import format_rate, parse_rate

__all__ = ["register"]

_RAW = argparse.RawDescriptionHelpFormatter

_UP = """\
Create a testbed of --hosts hosts that stays after the command exits, for jobs started from
other shells (autobyte launch --testbed NAME). Prints its name and addresses. Root only:
without it nothing is created.

    autobyte testbed up --hosts 3 --rate 1gbit
    autobyte testbed up --hosts 4 --up 1gbit --down 10gbit --latency 5ms --name abt1
"""

_RATE = """\
Change the link rates of a running testbed, at once or on a repeating schedule (to see how a
job's tuning follows the network). A schedule runs in the foreground until Ctrl-C, or to its
end with --once.

    autobyte testbed rate --rate 100mbit
    autobyte testbed rate --testbed abt1 --host 1 --up 50mbit
    autobyte testbed rate --testbed abt1 --schedule 1gbit:20,100mbit:20
"""

_STATUS = """\
Show the recorded testbeds: hosts, addresses and current rates.

    autobyte testbed status
    autobyte testbed status --testbed abt1
"""

_DOWN = """\
Delete testbeds: their processes, namespaces, links and state file. Says what could not be
removed.

    autobyte testbed down
    autobyte testbed down abt1 abt2
    autobyte testbed down --all
"""

_BENCH = """\
Check the shaping: on a fresh 2-host testbed, the TCP throughput one flow achieves at each
rate, and how soon after set_rate a flow runs at the new rate. Root only.

    autobyte testbed bench
    autobyte testbed bench --rates 50mbit,1gbit,5gbit --seconds 5
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "testbed", help="emulated cluster: hosts in network namespaces with shaped links",
        description=__doc__, formatter_class=_RAW)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                help="what to do (each has its own -h)")

    up = sub.add_parser(
        "up", help="create a testbed that stays until `down`", formatter_class=_RAW,
        description=_UP)
    up.add_argument("--hosts", type=int, required=True,
                    help=f"number of emulated hosts (1..{MAX_HOSTS})")
    _add_rates(up)
    up.add_argument("--latency", help="added one-way delay per host upload, e.g. 5ms (netem)")
    up.add_argument("--loss", type=float, help="packet loss %% per host upload (netem)")
    up.add_argument("--name", help="testbed name, 2-10 lowercase letters/digits (default: abt "
                    "+ random characters)")
    up.set_defaults(func=_up)

    rate = sub.add_parser(
        "rate", help="change rates now, or follow a schedule", formatter_class=_RAW,
        description=_RATE)
    _add_which(rate)
    rate.add_argument("--host", help="host index or name (default: all hosts)")
    _add_rates(rate)
    rate.add_argument("--schedule", help="RATE:SECONDS,... e.g. '10gbit:20,3gbit:20' (runs "
                      "in the foreground until Ctrl-C)")
    rate.add_argument("--once", action="store_true", help="run the schedule once, no repeat")
    rate.set_defaults(func=_rate)

    status = sub.add_parser(
        "status", help="show testbeds, hosts and rates", formatter_class=_RAW,
        description=_STATUS)
    status.add_argument("--testbed", help="name or state file (default: all)")
    status.set_defaults(func=_status)

    down = sub.add_parser(
        "down", help="delete testbeds (namespaces, links, processes)", formatter_class=_RAW,
        description=_DOWN)
    down.add_argument("names", nargs="*", help="testbed names (default: the only one)")
    down.add_argument("--all", action="store_true", help="every recorded testbed")
    down.set_defaults(func=_down)

    bench = sub.add_parser(
        "bench", help="measure achieved TCP throughput and rate-change latency on a fresh "
        "2-host testbed", formatter_class=_RAW,
        description=_BENCH)
    bench.add_argument("--rates", default="100mbit,1gbit",
                       help="rates to measure, comma-separated (default 100mbit,1gbit)")
    bench.add_argument("--seconds", type=float, default=3.0,
                       help="length of each flow (default 3)")
    bench.set_defaults(func=_bench)


def _add_rates(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", help="upload and download rate, e.g. 1gbit")
    parser.add_argument("--up", help="upload rate (overrides --rate)")
    parser.add_argument("--down", help="download rate (overrides --rate)")


def _add_which(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--testbed", help="name or state file (default: the only one)")


def _rates(args: argparse.Namespace) -> dict[str, float | None]:
    """--rate, --up and --down checked under their own names."""
    return {k: None if getattr(args, k) is None else parse_rate(getattr(args, k), f"--{k}")
            for k in ("rate", "up", "down")}


def _the_one(name: str | None) -> str:
    if name:
        return name
    names = [str(r["name"]) for r in records()]
    if len(names) != 1:
        raise ConfigError(f"say which testbed with --testbed; running: {names or 'none'}")
    return names[0]


def _up(args: argparse.Namespace) -> int:
    if not 1 <= args.hosts <= MAX_HOSTS:
        raise ConfigError(f"--hosts must be between 1 and {MAX_HOSTS}, but got "
                          f"--hosts={args.hosts}")
    if args.loss is not None and not 0 <= args.loss <= 100:
        raise ConfigError(f"--loss must be a percentage from 0 to 100, but got "
                          f"--loss={args.loss:g}")
    if args.name is not None and not NAME_RE.match(args.name):
        raise ConfigError(f"--name must be 2-10 lowercase letters or digits starting with a "
                          f"letter (it names namespaces), but got --name={args.name!r}")
    tb = Testbed(hosts=args.hosts, **_rates(args),
                 latency=parse_seconds(args.latency, "--latency"), loss=args.loss,
                 prefix=args.name, persistent=True)
    print(tb.describe())
    if tb.shaped:
        print(f"state: /run/autobyte/{tb.name}.json   (autobyte testbed down {tb.name})")
        return 0
    print("not shaped: nothing to keep up (run as root)", file=sys.stderr)
    return 1


def _rate(args: argparse.Namespace) -> int:
    rates = _rates(args)
    if args.schedule:
        try:
            steps = parse_schedule(args.schedule)
        except ConfigError as exc:
            raise ConfigError(f"--schedule {args.schedule!r}: {exc}") from None
    elif not any(rates.values()):
        raise ConfigError("say the new rate: --rate, --up, --down or --schedule")
    tb = Testbed.attach(_the_one(args.testbed))
    host = int(args.host) if args.host and args.host.isdigit() else args.host
    if args.schedule:
        runner = tb.run_schedule(steps, host=host, repeat=not args.once)
        try:
            while not runner.wait(0.5):
                pass
        finally:
            runner.stop()
        if runner.error is not None:
            raise TestbedError(str(runner.error))
        return 0
    tb.set_rate(rates["rate"], up=rates["up"], down=rates["down"], host=host)
    print(tb.describe())
    return 0


def _status(args: argparse.Namespace) -> int:
    names = [args.testbed] if args.testbed else [str(r["name"]) for r in records()]
    if not names:
        print("no testbeds")
    for name in names:
        try:
            print(Testbed.attach(name).describe())
        except TestbedError as exc:
            print(f"testbed {name}: {exc}")
    return 0


def _down(args: argparse.Namespace) -> int:
    names = ([str(r["name"]) for r in records()] if args.all
             else args.names or [_the_one(None)])
    failed = {name: left for name in names if (left := destroy(name))}
    for name in names:
        print(f"testbed {name}: " + ("NOT fully removed: " + ", ".join(failed[name])
                                     if name in failed else "down"))
    return 1 if failed else 0


def _bench(args: argparse.Namespace) -> int:
    from common.testbed._measure import measure_flow

    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    if not rates:
        raise ConfigError(f"--rates must list at least one rate, but got --rates={args.rates!r}")
    for rate in rates:
        parse_rate(rate, "--rates")
    if not args.seconds > 0:
        raise ConfigError(f"--seconds must be > 0, but got --seconds={args.seconds:g}")
    print(f"{'set rate':>10} {'achieved':>12} {'ratio':>6}")
    with Testbed(hosts=2, rate=rates[0]) as tb:
        if not tb.shaped:
            return 1
        for rate in rates:
            tb.set_rate(rate)
            flow = measure_flow(tb, 0, 1, seconds=args.seconds)
            target = tb.rates(0)[0] or 0.0
            print(f"{format_rate(target):>10} {format_rate(flow.rate()):>12} "
                  f"{flow.rate() / target:>6.3f}")
        if len(rates) >= 2:
            low, high = rates[0], rates[-1]
            for old, new in ((low, high), (high, low)):
                tb.set_rate(old)
                flow = measure_flow(tb, 0, 1, seconds=args.seconds,
                                    change=functools.partial(tb.set_rate, new))
                target = tb.rates(0)[0] or 0.0
                settle = flow.settle_time(target, window_s=0.1)
                shown = "never" if settle is None else f"{settle * 1e3:.0f} ms"
                print(f"rate change {old} -> {new}: a 100 ms window within 15% of the new rate "
                      f"ends {shown} after set_rate")
    return 0
