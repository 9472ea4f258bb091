"""``echomq`` as its command line, with ``echomq conformance`` over each transition's good case
in place of the whole table: for tests of the command's form (its options, its report, a shell
block of the docs as written), where the table itself is not what they check.
``tests/test_conformance_runner.py::test_report_on_a_server_in_use`` runs the whole table through
the command. Run as ``python -m tests.conformance_sample conformance --url ...``."""

from __future__ import annotations

import sys

from echomq.conformance import runner
from echomq.conformance.cases import Case
from tests.conformance.table import TABLE


def good_cases() -> list[Case]:
    """Each transition's good call: a run over these reports every transition."""
    return [case for case in TABLE if case.label == "good"]


def main() -> None:
    from echomq.cli.main import main as cli

    runner.all_cases = good_cases
    sys.argv[0] = "echomq"
    cli()


if __name__ == "__main__":
    main()
