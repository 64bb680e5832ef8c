"""The one typed source of truth for AutoByte's settings and every ``AUTOBYTE_*`` variable.

A ``Config`` holds the knobs. Precedence, lowest first: the defaults below, ``AUTOBYTE_*``
environment variables, keyword arguments. Every value is validated here, so the scheduler and
the adapters can trust a Config. Sizes may be given as ints (bytes) or strings ("4MiB",
"512KiB", "4MB"). The other variables describe the job a process is part of (most are set by
``autobyte launch``); ``environment`` reads and validates each of them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from common.errors import ConfigError
from common.units import format_bytes, parse_bytes

__all__ = ["CONTROL_ENDPOINT_ENV", "COORDINATOR_ENV", "COORDINATOR_TIMEOUT_ENV", "ENV_PREFIX",
           "LOG_DIR_ENV", "META_MODEL_ENV", "NUM_WORKERS_ENV", "RANK_ENV", "ROLE_ENV",
           "SECRET_ENV", "TESTBED_PREFIX_ENV", "VERBOSE_ENV", "Config", "environment",
           "known_env_vars"]

log = logging.getLogger(__name__)

ENV_PREFIX = "AUTOBYTE_"
MIN_PARTITION_BYTES = 4 * 1024
MAX_PARTITION_BYTES = 1024**3
MAX_CREDIT_BYTES = 16 * 1024**3
TUNERS = ("none", "observe", "default", "grid", "bayesian", "meta")

# The job's environment besides the knobs.
SECRET_ENV = "AUTOBYTE_SECRET"  # the control plane's shared key (launchers make one per job)
COORDINATOR_ENV = "AUTOBYTE_COORDINATOR"  # a standalone coordinator's address
CONTROL_ENDPOINT_ENV = "AUTOBYTE_CONTROL_ENDPOINT"  # where rank 0 hosts it (the launcher's)
COORDINATOR_TIMEOUT_ENV = "AUTOBYTE_COORDINATOR_TIMEOUT"  # s of silence before going on alone
LOG_DIR_ENV = "AUTOBYTE_LOG_DIR"  # decision logs and adapted networks (./autobyte-logs)
META_MODEL_ENV = "AUTOBYTE_META_MODEL"  # a meta-network file instead of the shipped one
TESTBED_PREFIX_ENV = "AUTOBYTE_TESTBED_PREFIX"  # the testbed's namespace names (abt)
RANK_ENV = "AUTOBYTE_RANK"
NUM_WORKERS_ENV = "AUTOBYTE_NUM_WORKERS"
ROLE_ENV = "AUTOBYTE_ROLE"
VERBOSE_ENV = "AUTOBYTE_VERBOSE"  # keep every framework log line, log at DEBUG
ROLES = ("worker", "server", "scheduler")
_ENDPOINT = re.compile(r"^(tcp://[^\s:]+:(\d+|\*)|ipc://\S+|inproc://\S+)$")
_PREFIX = re.compile(r"^[a-z][a-z0-9]{1,4}$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Scheduling knobs and tuning policy.

    partition_bytes: the step's gradients are cut into blocks of about this size (small
        tensors fused, large ones split).
    credit_bytes: bytes allowed in flight at once (the sliding window); >= partition_bytes.
    scheduling: False is native, the framework's own path: MultiWorkerMirroredStrategy's packed
        all-reduce, or native dist_sync's one key per tensor (a point the tuners choose too).
        The adapters start native (``common.plan.START``) unless a partition or credit is set.
    tuner: which tuner proposes new configurations while training runs.
    window_steps: steps per statistics window (the paper uses 10).
    gain_threshold: predicted relative gain needed before a reconfiguration (paper: 5%).
    adapt_threshold: relative prediction error that triggers online adaptation (paper: 10%).
    grace_s: how long a peer may make no progress (dead, frozen, cut off) before the job fails
        with an error naming it; shorter outages are survived.
    """

    partition_bytes: int = 1024 * 1024
    credit_bytes: int = 4 * 1024 * 1024
    scheduling: bool = True
    tuner: str = "meta"
    window_steps: int = 10
    gain_threshold: float = 0.05
    adapt_threshold: float = 0.10
    grace_s: float = 60.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _PARSERS[f.name](getattr(self, f.name), f.name))
        _check_credit(self.partition_bytes, self.credit_bytes, {})

    @property
    def credit_multiple(self) -> float:
        """Credit as a multiple of the partition size (the paper's 1x..16x)."""
        return self.credit_bytes / self.partition_bytes

    def replace(self, **changes: Any) -> Config:
        """A validated copy with some fields changed."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Config:
        _check_names(data)
        return cls(**data)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 start: Mapping[str, Any] | None = None, flags: Mapping[str, str] | None = None,
                 **overrides: Any) -> Config:
        """Defaults, overlaid by ``start`` (an adapter's own starting knobs,
        ``common.plan.START``), by ``AUTOBYTE_*`` variables, then by keyword ``overrides``.

        An error names what the user set: the variable, or for an override its entry in
        ``flags`` (a command's ``{"partition_bytes": "--partition"}``), else the keyword."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = dict(start or {})
        fields = {f.name for f in dataclasses.fields(cls)}
        names: dict[str, str] = {}
        for key, raw in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX):].lower()
            if name in fields:
                values[name], names[name] = raw, key
            elif key not in _OTHER_ENV_VARS:
                log.warning("ignoring unknown environment variable %s; known: %s",
                            key, ", ".join(known_env_vars()))
        _check_names(overrides)
        _check_names(flags or {})
        for name, value in overrides.items():
            if value is not None:
                values[name], names[name] = value, (flags or {}).get(name, name)
        if "scheduling" not in names and names.keys() & {"partition_bytes", "credit_bytes"}:
            values["scheduling"] = True  # knobs set by hand schedule, whatever the start says
        parsed = {k: _PARSERS[k](v, names.get(k, k)) for k, v in values.items()}
        default = cls()
        _check_credit(parsed.get("partition_bytes", default.partition_bytes),
                      parsed.get("credit_bytes", default.credit_bytes), names)
        return cls(**parsed)

    def describe(self) -> str:
        if not self.scheduling:
            return "native (the framework's own path)"
        return (f"partition={format_bytes(self.partition_bytes)} "
                f"credit={format_bytes(self.credit_bytes)} ({self.credit_multiple:.3g}x)")


def known_env_vars() -> list[str]:
    names = {ENV_PREFIX + f.name.upper() for f in dataclasses.fields(Config)}
    return sorted(names | _OTHER_ENV_VARS.keys())


def environment(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the ``AUTOBYTE_*`` variable ``name`` (one of the ``*_ENV`` names above),
    parsed; None when it is unset or empty. A malformed value is a ConfigError that names the
    variable and what it allows."""
    parse = _OTHER_ENV_VARS.get(name)
    if parse is None:
        raise ValueError(f"{name} is not one of AutoByte's job variables: "
                         f"{sorted(_OTHER_ENV_VARS)}")
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    return parse(raw, name) if raw else None


def _check_names(values: Mapping[str, Any]) -> None:
    fields = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; allowed: {sorted(fields)}")


def _check_credit(partition: int, credit: int, names: Mapping[str, str]) -> None:
    """The window must hold one chunk; ``names`` says what the user called each field."""
    if credit < partition:
        p_name = names.get("partition_bytes", "partition_bytes")
        c_name = names.get("credit_bytes", "credit_bytes")
        raise ConfigError(
            f"{c_name} must be >= {p_name} (the window must hold one chunk), but got "
            f"{c_name}={credit} ({format_bytes(credit)}) < {p_name}={partition} "
            f"({format_bytes(partition)})"
        )


def _size_in(low: int, high: int) -> Callable[[Any, str], int]:
    def parse(value: Any, name: str) -> int:
        size = parse_bytes(value, name)
        if not low <= size <= high:
            positive = "positive, " if size <= 0 else ""
            raise ConfigError(
                f"{name} must be {positive}between {low} ({format_bytes(low)}) and {high} "
                f"({format_bytes(high)}) bytes, but got {name}={value!r}"
            )
        return size
    return parse


def _parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true/false (or 1/0, on/off), but got {name}={value!r}")


def _parse_choice(choices: tuple[str, ...]) -> Callable[[Any, str], str]:
    def parse(value: Any, name: str) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ConfigError(f"{name} must be one of {list(choices)}, but got {name}={value!r}")
        return text
    return parse


def _number_in(kind: type, low: float, high: float) -> Callable[[Any, str], Any]:
    def parse(value: Any, name: str) -> Any:
        try:
            number = kind(value)
        except (TypeError, ValueError):
            msg = f"{name} must be a {kind.__name__}, but got {name}={value!r}"
            raise ConfigError(msg) from None
        if isinstance(value, bool) or not low <= number <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, but got {name}={value!r}")
        return number
    return parse


def _text(value: Any, name: str) -> str:
    return str(value)


def _matching(pattern: re.Pattern[str], allowed: str) -> Callable[[Any, str], str]:
    def parse(value: Any, name: str) -> str:
        if not pattern.match(str(value)):
            raise ConfigError(f"{name} must be {allowed}, but got {name}={value!r}")
        return str(value)
    return parse


_OTHER_ENV_VARS: dict[str, Callable[[Any, str], Any]] = {
    SECRET_ENV: _text,
    COORDINATOR_ENV: _matching(_ENDPOINT, "an address like tcp://<host>:<port>"),
    CONTROL_ENDPOINT_ENV: _matching(_ENDPOINT, "an address like tcp://<host>:<port>"),
    COORDINATOR_TIMEOUT_ENV: _number_in(float, 1.0, 3600.0),
    LOG_DIR_ENV: _text,
    META_MODEL_ENV: _text,
    TESTBED_PREFIX_ENV: _matching(_PREFIX, "2-5 lowercase letters/digits starting with a "
                                  "letter"),
    RANK_ENV: _number_in(int, 0, 1 << 20),
    NUM_WORKERS_ENV: _number_in(int, 1, 1 << 20),
    ROLE_ENV: _parse_choice(ROLES),
    VERBOSE_ENV: _parse_bool,
}

_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "partition_bytes": _size_in(MIN_PARTITION_BYTES, MAX_PARTITION_BYTES),
    "credit_bytes": _size_in(MIN_PARTITION_BYTES, MAX_CREDIT_BYTES),
    "scheduling": _parse_bool,
    "tuner": _parse_choice(TUNERS),
    "window_steps": _number_in(int, 1, 10_000),
    "gain_threshold": _number_in(float, 0.0, 10.0),
    "adapt_threshold": _number_in(float, 0.0, 10.0),
    "grace_s": _number_in(float, 1.0, 86_400.0),
}
