"""Progress lines between a job's processes and the command that watches them.

A worker prints ``AUTOBYTE-PROGRESS {json}`` on stdout; the launcher streams it (prefixed with
the process name) and ``parse`` finds it again in any line. JSON only, one object a line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from common.output import child_env, setup_logging

__all__ = ["MARK", "MODELS", "NATIVE", "WindowMeter", "emit", "parse", "parse_sweep",
           "sweep_config", "worker_args", "worker_env"]

MARK = "AUTOBYTE-PROGRESS "


def emit(kind: str, **fields: Any) -> None:
    """Print one progress record (``kind`` plus ``fields``) and flush."""
    sys.stdout.write(MARK + json.dumps({"kind": kind, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse(line: str) -> dict[str, Any] | None:
    """The record in ``line`` (anything may precede the mark), or None."""
    at = line.find(MARK)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(MARK):])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "kind" in record else None


MODELS = ("cnn", "mlp", "deep", "mobilenetv2", "densenet", "resnet", "vgg", "transformer",
          "lstm", "resnet20")
NATIVE = (0, 0)  # a sweep's (partition, credit) for native: the framework's own path


class WindowMeter:
    """Rank 0's progress per window of steps: the median step's speed (robust to a retrace),
    the window's mean speed (samples over wall time, what a user gets) and the process's CPU
    seconds per step."""

    def __init__(self, samples_per_step: int) -> None:
        self.samples_per_step = samples_per_step
        self.times: list[float] = []
        self.started = time.perf_counter()
        self.window_began = self.started
        self.cpu_began = time.process_time()
        self.step_began = self.started

    def begin(self) -> None:
        self.step_began = time.perf_counter()

    def end(self, step: int, window: int, config: str) -> None:
        now = time.perf_counter()
        self.times.append(now - self.step_began)
        if step % window:
            return
        cpu = time.process_time()
        wall = now - self.window_began
        emit("progress", step=step, samples_per_s=self.samples_per_step /
             statistics.median(self.times),
             mean_samples_per_s=self.samples_per_step * len(self.times) / wall if wall > 0
             else 0.0, cpu_s_per_step=(cpu - self.cpu_began) / len(self.times),
             elapsed_s=now - self.started, config=config)
        self.times.clear()
        self.window_began, self.cpu_began = now, cpu


def parse_sweep(text: str) -> list[tuple[int, int]]:
    """"64KiB:256KiB,1MiB:1MiB,native" -> [(65536, 262144), (1048576, 1048576), NATIVE]
    (checked sizes)."""
    from common.config import Config
    from common.errors import ConfigError
    from common.units import parse_bytes

    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        if item == "native":
            out.append(NATIVE)
            continue
        partition, sep, credit = item.partition(":")
        try:
            config = Config(partition_bytes=parse_bytes(partition, "sweep partition"),
                            credit_bytes=parse_bytes(credit if sep else partition,
                                                     "sweep credit"))
        except ConfigError as exc:
            raise ValueError(f"--sweep item {item!r}: {exc}") from None
        out.append((config.partition_bytes, config.credit_bytes))
    return out


def sweep_config(sweep: list[tuple[int, int]], every: int, step: int) -> tuple[int, int] | None:
    """The sweep's configuration to ask for after ``step`` (None when nothing changes then)."""
    if not sweep or step % every or step // every >= len(sweep):
        return None
    return sweep[step // every]


def worker_env() -> dict[str, str]:
    """Variables for the demo workers AutoByte starts, native and AutoByte alike: one OpenMP
    thread (two workers share the cores), MXNet's gradients ready per layer, the frameworks'
    log levels, and the OpenBLAS kernels for the CPU where its detection falls short
    (``openblas_core``)."""
    env = {"OMP_NUM_THREADS": "1", "MXNET_EXEC_BULK_EXEC_TRAIN": "0", **child_env()}
    core = openblas_core()
    if core is not None and "OPENBLAS_CORETYPE" not in os.environ:
        env["OPENBLAS_CORETYPE"] = core
    return env


def openblas_core(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The OpenBLAS kernels to ask for, or None to leave its detection alone. MXNet 1.9.1's
    OpenBLAS does not know CPUs newer than it (Sapphire Rapids) and runs its generic SSE3
    kernels there, which trained ResNet-20 1.45x slower than its AVX-512 ones (SkylakeX)."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    return "SkylakeX" if "avx512f" in flags else None


def worker_args(argv: list[str] | None, description: str | None) -> argparse.Namespace:
    """The command line of a demo worker (both adapters' ``demo`` modules), logging at INFO."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32, help="per worker")
    parser.add_argument("--model", choices=MODELS, default="cnn",
                        help="cnn (0.33 M parameters), mlp (3.2 M, communication-bound), "
                             "deep (1.2 M, more layers and compute), vgg (1.3 M, plain 3x3 "
                             "convolutions), transformer (0.27 M, a two-block attention "
                             "encoder), lstm (0.21 M, two recurrent layers), or "
                             "BatchNorm-heavy models with 100+ tensors: mobilenetv2 (2.2-2.3 M "
                             "parameters), densenet (DenseNet-121, 7.0 M) or "
                             "resnet (TensorFlow: ResNet-50, 23.6 M; MXNet: ResNet-34, 21.3 M)")
    parser.add_argument("--window", type=int, default=0,
                        help="steps per progress record (default: the job's window_steps)")
    parser.add_argument("--baseline", action="store_true",
                        help="the framework's own all-reduce / dist_sync, no AutoByte")
    parser.add_argument("--local", action="store_true",
                        help="no communication: every worker trains alone (compute alone, "
                             "for the bound)")
    parser.add_argument("--sweep", default="", metavar="P:C,P:C,...",
                        help="configurations ('native' for the framework's own path) to "
                             "switch through, one every --sweep-steps steps "
                             "(a measured grid; use with AUTOBYTE_TUNER=none)")
    parser.add_argument("--sweep-steps", type=int, default=20)
    parser.add_argument("--devices", type=int, default=1,
                        help="MXNet: CPU contexts per worker, each training on its share of "
                             "the batch, as on a machine with several GPUs (TensorFlow: 1)")
    args = parser.parse_args(argv)
    try:
        args.sweep = parse_sweep(args.sweep)
    except ValueError as exc:
        parser.error(str(exc))
    if args.steps < 1 or args.batch < 1 or args.window < 0 or args.devices < 1:
        parser.error(f"--steps, --batch and --devices must be >= 1 and --window >= 0, got "
                     f"steps={args.steps}, batch={args.batch}, devices={args.devices}, "
                     f"window={args.window}")
    setup_logging()
    return args
