"""No import circle through a package's ``__init__``.

import-linter (``make lint``) reads ``from pkg import mod`` as an import of ``pkg.mod`` alone, so a
module that takes a sibling through its package's face, while that face imports the module, is
a circle it does not see: the face runs the module, which asks the half-made face for a name.
Here every ``from P import ...`` of a package ``P`` counts as importing ``P``'s ``__init__``, and
every import counts wherever it stands (inside a function or under ``TYPE_CHECKING`` too)."""

from __future__ import annotations

import ast
from pathlib import Path

import echomq

ROOT = Path(echomq.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(name: str) -> bool:
    return (ROOT.parent / Path(*name.split(".")) / "__init__.py").exists()


def is_module(name: str) -> bool:
    path = ROOT.parent / Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def resolved(node: ast.ImportFrom, here: str, package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = here.split(".") if package else here.split(".")[:-1]
    base = parts[:len(parts) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path) -> set[str]:
    """The modules of the package that ``path`` imports: a package named by ``from P import``
    as its face, a submodule named there as itself too."""
    here, found = module_name(path), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = resolved(node, here, path.name == "__init__.py")
            found.add(source)
            if is_package(source):
                found |= {f"{source}.{alias.name}" for alias in node.names
                          if is_module(f"{source}.{alias.name}")}
    return {name for name in found if name.split(".")[0] == "echomq" and name != here}


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports_of(path) for path in ROOT.rglob("*.py")}


def circle_through_a_face(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports that passes through some package's ``__init__``, or None."""
    faces = [name for name in edges if is_package(name)]
    for face in faces:
        trail = {face: [face]}
        todo = [face]
        while todo:
            at = todo.pop()
            for nxt in sorted(edges.get(at, ())):
                if nxt == face:
                    return [*trail[at], face]
                if nxt not in trail:
                    trail[nxt] = [*trail[at], nxt]
                    todo.append(nxt)
    return None


def test_no_module_imports_through_a_face_that_imports_it() -> None:
    assert circle_through_a_face(graph()) is None


def test_the_check_sees_a_sibling_taken_through_the_face() -> None:
    # The circle the package had: the face imports the catalog, the catalog a sibling through it.
    edges = {"echomq.conformance.cases": {"echomq.conformance.cases.catalog"},
             "echomq.conformance.cases.catalog": {"echomq.conformance.cases",
                                                  "echomq.conformance.cases.flat"},
             "echomq.conformance.cases.flat": set()}
    assert circle_through_a_face(edges) == ["echomq.conformance.cases",
                                            "echomq.conformance.cases.catalog",
                                            "echomq.conformance.cases"]
    source = ast.parse("from echomq.conformance.cases import flat").body[0]
    assert isinstance(source, ast.ImportFrom)
