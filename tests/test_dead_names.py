"""No dead constants: every module-level constant of the package (an UPPER_CASE name bound at a
module's top level) is read somewhere — in the package, its tests or the benchmark."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "echomq"
SOURCES = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")


def constants_of(module: Path) -> list[str]:
    """The UPPER_CASE names bound at ``module``'s top level (``__all__`` aside)."""
    names = []
    for node in ast.parse(module.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names += [target.id for target in targets if isinstance(target, ast.Name)
                  and CONSTANT.fullmatch(target.id) and target.id != "__all__"]
    return names


def test_every_module_constant_is_read_somewhere() -> None:
    words = Counter(word for source in SOURCES
                    for word in re.findall(r"\w+", source.read_text(errors="replace")))
    dead = [f"{module.relative_to(ROOT)}: {name}" for module in sorted(PACKAGE.rglob("*.py"))
            for name in constants_of(module) if words[name] < 2]
    assert not dead, dead
