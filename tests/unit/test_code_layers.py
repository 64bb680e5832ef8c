"""The library apart from the lab: what training processes import never imports the testbed,
the launcher, the evaluation or the commands, so a worker loads only the library."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
LAB = ("common.bench", "common.testbed", "common.launch", "common.commands", "common.cli")
LIBRARY = [p for package in ("common", "autobyte_tf", "autobyte_mx")
           for p in sorted((ROOT / package).rglob("*.py"))
           if not any(p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
                      .startswith(lab) for lab in LAB)]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_library_never_imports_the_lab() -> None:
    assert len(LIBRARY) > 80  # the walk found the packages
    offending = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p)
                                                  if n.startswith(LAB))
                 for p in LIBRARY}
    assert {k: v for k, v in offending.items() if v} == {}
