"""The consumer: one sans-I/O core (``loop``: every decision of claim, run, settle, heartbeat,
housekeep and park; ``beat``: their sequencing, as programs that yield ``actions``) and two
shells that only perform its actions — ``blocking`` (threads) and ``aio`` (asyncio), each with
its parking — with what both share (``shell``), how a server fault is read (``faults``), a
handler's directives and a consumer's presence in the live-worker registry (``presence``; read
back by ``roster``).

Names load on first use (PEP 562): ``from echomq.consumer import Consumer``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from echomq._lazy import lazy_face

if TYPE_CHECKING:
    from echomq.consumer.blocking import Consumer

__all__ = ["Consumer"]

__getattr__, __dir__ = lazy_face(__name__, {"Consumer": "echomq.consumer.blocking"}, __all__)
