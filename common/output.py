"""What AutoByte's own commands and demo workers print: quiet unless asked.

A healthy run shows AutoByte's INFO lines (one per decision) and WARNINGs a user should act on;
the frameworks' start-up chatter (TensorFlow's C++ INFO lines and its ``cuInit`` error on a
machine without a GPU, MXNet's storage-fallback notes) is left out. ``-v`` on the command line,
or ``AUTOBYTE_VERBOSE=1`` in a worker's environment, keeps everything and logs at DEBUG.
Scripts that import AutoByte themselves keep their own logging: nothing here runs on import.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from common.config import VERBOSE_ENV, environment

__all__ = ["VERBOSE_ENV", "child_env", "filtered_stderr", "import_tensorflow", "is_noise",
           "setup_logging", "verbose"]

OWN = ("common", "autobyte_tf", "autobyte_mx", "__main__")

# TensorFlow 2.21 writes these before absl's logging is initialised, whatever
# TF_CPP_MIN_LOG_LEVEL says: the banner, its C++ INFO/WARNING lines (with their continuation
# lines), and the cuInit failure of a machine without a GPU.
_BANNER = "WARNING: All log messages before absl::InitializeLog() is called"
_CPP = re.compile(r"^[IWE]\d{4} [\d:. ]+\d+ \S+:\d+\] ")
_CPP_ERROR_NOISE = re.compile(r"cuInit|cuda|CUDA|cuDNN|cuFFT|cuBLAS|TensorRT|"
                              r"oneDNN supports DT_BOOL only")


def verbose() -> bool:
    return bool(environment(VERBOSE_ENV))


def child_env(verbose_: bool | None = None) -> dict[str, str]:
    """Variables for a worker process AutoByte starts: the frameworks' own log levels, and
    ``AUTOBYTE_VERBOSE`` when verbose."""
    loud = verbose() if verbose_ is None else verbose_
    if loud:
        return {VERBOSE_ENV: "1", "TF_CPP_MIN_LOG_LEVEL": "0"}
    return {"TF_CPP_MIN_LOG_LEVEL": "2", "MXNET_STORAGE_FALLBACK_LOG_VERBOSE": "0"}


def setup_logging(verbose_: bool | None = None) -> None:
    """AutoByte's loggers at INFO (DEBUG when verbose), everyone else's at WARNING
    (TensorFlow's at ERROR: its INFO and WARNING lines narrate MultiWorkerMirroredStrategy);
    TensorFlow's C++ INFO and WARNING lines off, for a TensorFlow this process imports later."""
    loud = verbose() if verbose_ is None else verbose_
    for key, value in child_env(loud).items():
        os.environ.setdefault(key, value)
    logging.basicConfig(level=logging.INFO if loud else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for name in OWN:
        logging.getLogger(name).setLevel(logging.DEBUG if loud else logging.INFO)
    if not loud:
        tf_log = logging.getLogger("tensorflow")
        tf_log.setLevel(logging.ERROR)
        tf_log.propagate = False  # absl's handler would print it a second time


def is_noise(line: str) -> bool:
    """A framework start-up line a user need not see (see the module docstring)."""
    if line.startswith(_BANNER):
        return True
    if _CPP.match(line):
        return line[0] in "IW" or bool(_CPP_ERROR_NOISE.search(line))
    return False


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Run the block with file descriptor 2 going to a file, then write back every line but
    the noise (a C++ line's continuation lines go with it). Nothing is lost: what is not noise
    is written when the block ends, also when it raises. Verbose: no filtering."""
    if verbose():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            _replay(tmp.read().decode("utf-8", "replace"))


def _replay(text: str) -> None:
    dropping = False
    kept = []
    for line in text.splitlines(keepends=True):
        if is_noise(line):
            dropping = True
            continue
        if dropping and not _CPP.match(line) and not line.startswith(("Traceback", "  File")) \
                and line[:1].isupper() and not re.match(r"^\w+(Error|Warning)\b", line):
            continue  # a C++ line's continuation ("To enable the following instructions...")
        dropping = False
        kept.append(line)
    if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()


def import_tensorflow() -> Any:
    """``import tensorflow`` and its device discovery, with the start-up noise filtered."""
    with filtered_stderr():
        import tensorflow as tf

        tf.config.list_physical_devices()
    return tf
