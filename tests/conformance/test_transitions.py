"""Every transition on both executors: raw replies under RESP2 and RESP3, and the keyspaces.

The case table and the comparison are the package's (echomq.conformance), the ones
``echomq conformance`` runs against any server. A case runs under both protocols where its reply
holds a null, under one elsewhere (``tests/conformance/conftest.py``, under_each_protocol).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from echomq.conformance.cases import Case, case_differences
from tests.conformance.conftest import Pairs, under_each_protocol
from tests.conformance.table import TABLE

CASES = list(TABLE)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_case(pairs: Pairs, case: Case) -> None:
    found = under_each_protocol(pairs, case, lambda pair: case_differences(pair, case))
    assert found == {protocol: [] for protocol in found}


def test_every_transition_has_cases() -> None:
    from echomq.engine.transitions import TRANSITIONS

    covered = {case.transition.name for case in CASES if not case.expect.startswith(b"-")}
    assert covered == {t.name for t in TRANSITIONS}


def test_no_executor_reads_the_callers_protocol() -> None:
    """What runs a case under one protocol unless its reply holds a null rests on this: no
    script switches its own calls to RESP3, no native command asks for the client's protocol,
    and the native replies are of the kinds whose bytes are the same under both protocols, but
    the null (the server writes a script's reply, false as a null, in the client's)."""
    scripts = sorted((ROOT / "echomq" / "lua").rglob("*.lua"))
    native = sorted((ROOT / "native").glob("*.[ch]"))
    assert scripts and native
    assert [p.name for p in scripts if "setresp" in p.read_text()] == []
    # valkeymodule.h, the module's only view of the API, declares neither the RESP3 context
    # flag nor the client-info calls that would tell it the client's protocol.
    assert [p.name for p in native if re.search(r"FLAGS_RESP3|ClientInfo",
                                                  p.read_text())] == []
    used = {kind for p in native if p.name != "valkeymodule.h"
            for kind in re.findall(r"ReplyWith(\w+)", p.read_text())}
    assert used <= {"Array", "LongLong", "Null", "SimpleString", "String", "StringBuffer",
                    "Error", "ErrorFormat", "CString"}, used
