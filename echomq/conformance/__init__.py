"""Executor parity, checked: the case table, the harness that runs a case on both executors
(scripts by EVALSHA and trafikey's EMQ.* commands) and compares replies byte for byte and
keyspaces key by key, a Python model of the transitions, and the runner behind
``echomq conformance``. The test suite drives the same tables through the same harness."""
