"""The engine: the protocol table (``transitions``) and what is made from it — the calls a queue
sends (``calls``), the Lua scripts assembled from ``echomq/lua/`` (``scripts``), the module's
generated header (``protocol_gen``, ``error_header``), the native rules through cffi (``native``),
the two executors (``executors``, ``async_executors``) and the error table (``errors``).

It imports nothing above it; ``import echomq.engine.transitions`` needs only the standard library.
"""
