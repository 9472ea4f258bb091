"""The peers' no-op jobs and apps, importable by their workers (``bench.peers.*``)."""
