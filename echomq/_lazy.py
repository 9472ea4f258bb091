"""Package faces that load their names on first use (PEP 562): importing one module of a
package loads only what that module imports, never the package's other modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(package: str, homes: Mapping[str, str],
              public: list[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name of ``homes`` is imported
    from the module named beside it on first use (then kept in the package); any other name is
    tried as a submodule, as ``import package.name`` would."""
    namespace = importlib.import_module(package).__dict__

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
            namespace[name] = value
            return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted({*namespace, *public})

    return getattr_, dir_
