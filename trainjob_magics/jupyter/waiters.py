"""Long-poll requests waiting on the event loop for the inventory's next change (no thread
per waiting page)."""

from __future__ import annotations

import asyncio


class Waiters:
    """``wake()`` (on the loop) resolves every pending ``wait()``."""

    def __init__(self) -> None:
        self._futures: set[asyncio.Future[None]] = set()

    async def wait(self, timeout: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._futures.add(future)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self._futures.discard(future)

    def wake(self) -> None:
        for future in list(self._futures):
            if not future.done():
                future.set_result(None)
        self._futures.clear()
