"""What the wheel carries of the package's data files, as pyproject.toml declares it: a file is
shipped when its directory is a package of ``[tool.setuptools] packages`` and a glob of that
package's ``package-data`` matches its name. A data file in a directory that is not a listed
package is what setuptools warns of at every build (and may stop shipping)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setuptools_table() -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"]
    return table


def shipped(path: Path) -> bool:
    """Whether ``path`` (a file of the checkout, under echomq/) is in the wheel."""
    table = setuptools_table()
    package = ".".join(path.parent.relative_to(ROOT).parts)
    packages = table["packages"]
    globs = table["package-data"]
    assert isinstance(packages, list) and isinstance(globs, dict)
    return package in packages and any(fnmatch(path.name, glob)
                                       for glob in globs.get(package, []))
