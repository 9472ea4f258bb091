"""What a queue's name may be, and the prefix of its keys: the one check every way in goes
through (Queue, sharded or asyncio, an App and its tasks, the command line, the dashboard)."""

from __future__ import annotations

# What a queue's name may not hold: the braces that mark its keys' hash tag, the slash that ends
# a path segment of the dashboard's API, and the control characters (C0, DEL, C1) a terminal or
# a log line cannot show as they are (NUL among them).
QUEUE_NAME_REFUSED = frozenset("{}/" + "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)])))
QUEUE_NAME_RULE = "non-empty UTF-8 text free of braces, slashes and control characters"


def queue_base(name: str) -> str:
    """The prefix of every key of queue ``name``; the hash tag keeps the queue in one slot.
    ValueError for a name no queue may have (``QUEUE_NAME_RULE``): the one check of every way
    in, Queue, sharded or asyncio, an App, the command line and the dashboard."""
    if not name or not QUEUE_NAME_REFUSED.isdisjoint(name) or not _utf8(name):
        raise ValueError(f"a queue name is {QUEUE_NAME_RULE}, not {name!r}")
    return f"emq:{{{name}}}:"


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True
