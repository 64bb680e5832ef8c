"""Every exception AutoByte raises on purpose, in one place.

``AutoByteError`` is the root. Errors a running job can survive (a bad message on the control
plane, a predictor that cannot be loaded) derive from ``RecoverableError``; the rest stop the
job with a message that says what was wrong and what is allowed.
"""

from __future__ import annotations

__all__ = [
    "AutoByteError",
    "ConfigError",
    "ControlError",
    "FrameworkMissingError",
    "LaunchError",
    "ModelFileError",
    "RecoverableError",
    "SchedulerError",
    "TestbedError",
    "UnsupportedError",
]


class AutoByteError(Exception):
    """Root of every error raised by AutoByte."""


class RecoverableError(AutoByteError):
    """Training can go on: the caller logs it and keeps the last good state."""


class ConfigError(AutoByteError, ValueError):
    """A configuration value (keyword, CLI flag or AUTOBYTE_* variable) is invalid."""


class SchedulerError(AutoByteError):
    """The scheduler was used out of protocol (e.g. a chunk finished twice)."""


class FrameworkMissingError(AutoByteError, ImportError):
    """An optional framework (TensorFlow, MXNet, Keras) is not installed."""


class TestbedError(AutoByteError):
    """The emulated cluster could not be set up, changed or torn down."""

    __test__ = False  # not a pytest test class despite the name


class LaunchError(AutoByteError):
    """A launched job could not start or one of its processes failed."""


class ControlError(RecoverableError):
    """A control-plane message was malformed, unauthenticated, replayed or stale."""


class ModelFileError(RecoverableError):
    """A meta-network file is missing, corrupted or incompatible."""


class UnsupportedError(AutoByteError, NotImplementedError):
    """A framework feature AutoByte does not handle (sparse gradients, async kvstore, ...)."""
