"""``autobyte simulate``: iteration time, speed and the lower bound of a training job, modelled.

    autobyte simulate --model vgg16 --workers 8 --arch ps --bandwidth 10gbit \\
        --partition 4MB --credit 16MB
    autobyte simulate --model resnet50 --workers 128 --arch allreduce --credit 8x
    autobyte simulate --model alexnet --workers 8 --grid
    autobyte simulate --model resnet50 --bandwidth-schedule 10gbit:20,3gbit:20 --steps 40

The simulator drives AutoByte's own scheduler with modelled compute and network events (see
common/sim), to see what a configuration would do before running it. --credit takes a size or
a multiple of the partition ("4x"). --grid evaluates every (partition, credit multiple) pair of
the search space and marks the best. AUTOBYTE_PARTITION_BYTES and AUTOBYTE_CREDIT_BYTES apply
when the flags are not given. At most 4096 workers: the models follow one worker on a flat
ring or a set of servers, and larger jobs use hierarchical all-reduce, which is not modelled.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from common.config import MAX_PARTITION_BYTES, MIN_PARTITION_BYTES, Config
from common.errors import ConfigError
from common.units import format_bytes, format_rate, parse_bytes, parse_rate

__all__ = ["MAX_WORKERS", "parse_seconds", "register"]

MAX_WORKERS = 4096
MAX_STEPS = 100_000
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "": 1.0}
_FLAGS = {"partition_bytes": "--partition", "credit_bytes": "--credit"}


def register(subparsers: Any) -> None:
    from common.sim import DEFAULT_LATENCY_S, DEFAULT_OVERHEAD_S, MODELS

    parser = subparsers.add_parser(
        "simulate", help="model a training job: iteration time, speed and the lower bound",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=MODELS, help="layer profile")
    parser.add_argument("--workers", type=int, default=8,
                        help=f"workers (default 8, at most {MAX_WORKERS})")
    parser.add_argument("--arch", choices=["ps", "allreduce"], default="allreduce",
                        help="parameter server or ring all-reduce (default allreduce)")
    parser.add_argument("--servers", type=int,
                        help="PS servers (default: one per worker, as BytePS deploys them)")
    rate = parser.add_mutually_exclusive_group()
    rate.add_argument("--bandwidth", default="10gbit", help="per-link rate (default 10gbit)")
    rate.add_argument("--bandwidth-schedule", metavar="RATE:SECONDS,...",
                      help="repeating rate schedule, e.g. 10gbit:20,3gbit:20")
    parser.add_argument("--partition", help="partition size, e.g. 4MB or 512KiB (default "
                        "AUTOBYTE_PARTITION_BYTES or 1MiB)")
    parser.add_argument("--credit", help="credit size (e.g. 16MB) or multiple (e.g. 4x) "
                        "(default AUTOBYTE_CREDIT_BYTES or 4MiB)")
    parser.add_argument("--no-scheduling", action="store_true",
                        help="send whole tensors in framework order (the unscheduled baseline)")
    parser.add_argument("--batch-size", type=int, default=32, help="per worker (default 32)")
    parser.add_argument("--compute-scale", type=float, default=1.0,
                        help="multiply compute times (2 = a device twice as slow)")
    parser.add_argument("--overhead", default=f"{DEFAULT_OVERHEAD_S * 1e6:g}us",
                        help="fixed cost per block (default %(default)s)")
    parser.add_argument("--latency", default=f"{DEFAULT_LATENCY_S * 1e6:g}us",
                        help="latency per message or ring hop (default %(default)s)")
    parser.add_argument("--steps", type=int, default=1,
                        help="iterations to average (default 1; use more with a schedule)")
    parser.add_argument("--grid", action="store_true",
                        help="evaluate the whole search space and mark the best")
    parser.add_argument("--partitions", help="grid partition sizes, comma-separated "
                        "(default 64KiB..64MiB)")
    parser.add_argument("--credits", help="grid credit multiples, comma-separated "
                        "(1..16, default all)")
    parser.set_defaults(func=run)


def parse_seconds(value: str, name: str) -> float:
    """``"100us"``, ``"0.5ms"``, ``"2s"`` or a bare number of seconds."""
    match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-z]*)\s*",
                         str(value))
    if match is None or match.group(2) not in _SECONDS:
        raise ConfigError(f"{name} must be a duration like '100us', '0.5ms' or '0.001', "
                          f"but got {name}={value!r}")
    seconds = float(match.group(1)) * _SECONDS[match.group(2)]
    if seconds < 0:
        raise ConfigError(f"{name} must be >= 0, but got {name}={value!r}")
    return seconds


def run(args: argparse.Namespace) -> int:
    from common.sim import get_profile

    options = _sim_options(args)  # every flag checked before anything is printed
    config = _config(args)
    space = _space(args) if args.grid else None
    profile = get_profile(args.model, compute_scale=args.compute_scale,
                          batch_size=args.batch_size)
    print(f"model {profile.name}: {len(profile.layers)} layers, "
          f"{format_bytes(profile.total_bytes)} of gradients, compute "
          f"{profile.compute_s * 1e3:.1f} ms/iteration at batch {profile.batch_size}")
    cluster = f"{_plural(options['workers'], 'worker')}, {options['arch']}"
    if options["arch"] == "ps":
        cluster += f" with {_plural(options['servers'], 'server')}"
    link = (f"schedule {args.bandwidth_schedule} (repeating)" if args.bandwidth_schedule
            else format_rate(options["bandwidth"]))
    print(f"cluster: {cluster}, links {link}, overhead {args.overhead}/block, "
          f"latency {args.latency}")
    if space is not None:
        base = config if (args.partition or args.credit) else Config()
        return _grid(space, base, profile, options)
    return _single(args, config, profile, options)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _count(value: int, flag: str, low: int, high: int, why: str = "") -> int:
    if not low <= value <= high:
        raise ConfigError(f"{flag} must be between {low} and {high}{why}, but got "
                          f"{flag}={value}")
    return value


def _sim_options(args: argparse.Namespace) -> dict[str, Any]:
    from common.sim import BandwidthSchedule

    workers = _count(args.workers, "--workers", 1, MAX_WORKERS,
                     " (larger jobs use hierarchical all-reduce, which is not modelled)")
    servers = _count(workers if args.servers is None else args.servers, "--servers", 1,
                     MAX_WORKERS)
    _count(args.batch_size, "--batch-size", 1, 1 << 20)
    if not (math.isfinite(args.compute_scale) and args.compute_scale > 0):
        raise ConfigError(f"--compute-scale must be > 0, but got "
                          f"--compute-scale={args.compute_scale:g}")
    bandwidth: Any = parse_rate(args.bandwidth, "--bandwidth")
    if args.bandwidth_schedule:
        try:
            bandwidth = BandwidthSchedule.parse(args.bandwidth_schedule)
        except ConfigError as exc:
            raise ConfigError(f"--bandwidth-schedule: {exc}") from None
    return {"workers": workers, "arch": args.arch, "servers": servers,
            "bandwidth": bandwidth, "overhead_s": parse_seconds(args.overhead, "--overhead"),
            "latency_s": parse_seconds(args.latency, "--latency"),
            "steps": _count(args.steps, "--steps", 1, MAX_STEPS)}


def _config(args: argparse.Namespace) -> Config:
    partition = args.partition
    credit = args.credit
    if credit is not None and str(credit).strip().lower().endswith("x"):
        multiple_text = str(credit).strip()[:-1]
        try:
            multiple = float(multiple_text)
        except ValueError:
            multiple = -1.0
        if not multiple >= 1:
            raise ConfigError(f"--credit as a multiple must be a number >= 1 followed by x, "
                              f"e.g. 4x, but got --credit={credit!r}")
        size = Config.from_env(partition_bytes=partition, flags=_FLAGS).partition_bytes
        credit = int(size * multiple)
    return Config.from_env(partition_bytes=partition, credit_bytes=credit,
                           scheduling=False if args.no_scheduling else None, flags=_FLAGS)


def _space(args: argparse.Namespace) -> Any:
    from common.tuners import MAX_CREDIT_MULTIPLE, SearchSpace

    options: dict[str, Any] = {}
    if args.partitions:
        sizes = [parse_bytes(p, "--partitions") for p in args.partitions.split(",")]
        if not all(MIN_PARTITION_BYTES <= s <= MAX_PARTITION_BYTES for s in sizes):
            raise ConfigError(f"--partitions must be sizes between "
                              f"{format_bytes(MIN_PARTITION_BYTES)} and "
                              f"{format_bytes(MAX_PARTITION_BYTES)}, but got "
                              f"--partitions={args.partitions!r}")
        options["partitions"] = sizes
    if args.credits:
        try:
            multiples = [int(m) for m in args.credits.split(",")]
        except ValueError:
            multiples = []
        if not multiples or not all(1 <= m <= MAX_CREDIT_MULTIPLE for m in multiples):
            raise ConfigError(f"--credits must be comma-separated whole multiples from 1 to "
                              f"{MAX_CREDIT_MULTIPLE}, e.g. 1,2,4,8, but got "
                              f"--credits={args.credits!r}")
        options["credit_multiples"] = multiples
    return SearchSpace(**options)


def _single(args: argparse.Namespace, config: Config, profile: Any,
            options: dict[str, Any]) -> int:
    from common.sim import simulate

    result = simulate(profile, config, **options)
    blocks = len(result.trace) / len(result.step_s)
    print(f"config: {config.describe()}")
    print(f"iteration {result.iteration_s * 1e3:.1f} ms   speed {result.speed:.1f} samples/s   "
          f"lower bound {result.lower_bound_s * 1e3:.1f} ms "
          f"({result.efficiency:.1%} of the limit)")
    if args.bandwidth_schedule:
        print("(with a schedule the bound uses its mean rate: a long-run bound, which a few "
              "steps that fall in fast phases can beat)")
    line = f"blocks per iteration: {blocks:g}"
    if config.scheduling:
        native = simulate(profile, config.replace(scheduling=False), **options)
        line += (f"   native {native.iteration_s * 1e3:.1f} ms "
                 f"(speedup {native.iteration_s / result.iteration_s:.2f}x)")
    print(line)
    return 0


def _grid(space: Any, base: Config, profile: Any, options: dict[str, Any]) -> int:
    from common.sim import lower_bound, simulate

    speeds = {(p, m): simulate(profile, space.config(p, m, base),
                               **{**options, "trace": False}).speed for p, m in space}
    best = max(speeds, key=lambda k: speeds[k])
    bound = lower_bound(profile, workers=options["workers"], arch=options["arch"],
                        servers=options["servers"], bandwidth=options["bandwidth"])
    limit = options["workers"] * profile.batch_size / bound
    print(f"lower bound {bound * 1e3:.1f} ms/iteration = {limit:.1f} samples/s, the limit for "
          f"every configuration")
    print(f"speed (samples/s) by partition (rows) and credit multiple (columns); "
          f"* marks the best of {len(space)}")
    width = max(8, len(f"{max(speeds.values()):.1f}") + 2)
    print(f"{'partition':>10} " + "".join(f"{str(m) + 'x':>{width}}"
                                          for m in space.credit_multiples))
    for p in space.partitions:
        cells = "".join(f"{f'{speeds[p, m]:.1f}' + ('*' if (p, m) == best else ' '):>{width}}"
                        for m in space.credit_multiples)
        print(f"{format_bytes(p):>10} {cells}")
    native = simulate(profile, space.native_config(base), **{**options, "trace": False})
    print(f"{'native':>10} {native.speed:>{width}.1f}   (the framework's own path)")
    winner = simulate(profile, space.config(*best, base), **options)
    print(f"best: partition={format_bytes(best[0])} credit={best[1]}x "
          f"({format_bytes(best[0] * best[1])}): iteration {winner.iteration_s * 1e3:.1f} ms, "
          f"speed {winner.speed:.1f} samples/s, lower bound {winner.lower_bound_s * 1e3:.1f} ms "
          f"({winner.efficiency:.1%} of the limit)")
    return 0
