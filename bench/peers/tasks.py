"""The no-op job every system runs."""


def noop() -> None:
    """Does nothing: the benchmark measures the queue, not the job."""


async def anoop(ctx: dict) -> None:  # arq passes its context first
    """The async no-op (arq)."""
