"""Reliability, security and scale-out scenarios: crashes, replication and failover, ACL
isolation, Valkey Cluster with resharding, and memory pressure (see docs/CLUSTER.md)."""
