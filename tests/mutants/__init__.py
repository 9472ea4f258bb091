"""The mutation check (``make mutants``): seeded bugs, each run against ``make test-quick``."""
