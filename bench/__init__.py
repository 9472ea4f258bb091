"""echomq's benchmark harness: `make bench` (or `python -m bench [--quick]`)."""
