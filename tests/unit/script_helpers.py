"""Loading benchmarks/ scripts in tests (a uniquely named module: tests have no __init__.py)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def script_main(name: str) -> Callable[[list[str]], int]:
    """``main`` of benchmarks/<name>.py, loaded from its file (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    main: Callable[[list[str]], int] = module.main
    return main
