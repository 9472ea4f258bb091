"""Task functions several test Apps register, each under its own name and options."""

from __future__ import annotations


def add(a: int, b: int) -> int:
    return a + b


def broken(reason: str) -> None:
    raise RuntimeError(reason)
