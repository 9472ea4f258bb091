"""The case table, built once per process: every test module that runs it takes it from here
(``all_cases()`` builds and checks the whole table on each call, seconds on a loaded machine,
and each pytest-xdist worker collects every module)."""

from __future__ import annotations

from echomq.conformance.cases import Case, all_cases

TABLE: tuple[Case, ...] = tuple(all_cases())
