"""The registry of queue names, read by the operator's tools (``echomq.ops.admin``).

It lives outside every queue's hash slot, so it is written by clients (never inside a transition,
which on a cluster touches one slot only): a ``Queue`` adds its name after its first admission,
and the tools add any queue they look at. A name stays until it is forgotten, so a drained queue
is still listed.
"""

REGISTRY_KEY = "emq:queues"
# Set once the keyspace has been searched for queues made before the registry existed.
DISCOVERED_KEY = "emq:queues:discovered"
