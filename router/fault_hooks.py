"""The router's fault hook for the KV-integrity tests: swap two requests' KV handoffs.

Built only when the router's environment names a fault file (pdserve.kv_transfer.faults);
then, while that file holds the line `swap_handoffs`, the first handoff to arrive waits (up
to `pair_wait_s`) for a second one and the two requests continue with each other's handoff —
what a bug that mixes up concurrent requests would do. The decode engines' identity check
must catch it (docs/kv-integrity.md). Never armed in a deployment.
"""

from __future__ import annotations

import asyncio
import logging

from pdserve.kv_transfer.faults import FaultSwitch
from pdserve.kv_transfer.params import KVHandoff

log = logging.getLogger("pdserve.router")


class HandoffSwapper:
    """One per router replica; `exchange` is called once per remote prefill, on the event
    loop."""

    def __init__(self, switch: FaultSwitch, pair_wait_s: float = 10.0):
        self._switch = switch
        self._pair_wait_s = pair_wait_s
        self._waiting: tuple[KVHandoff, asyncio.Future[KVHandoff]] | None = None

    async def exchange(self, handoff: KVHandoff) -> KVHandoff:
        """The handoff this request continues with: its own, or (fault on) its partner's."""
        if not self._switch.on("swap_handoffs"):
            return handoff
        if self._waiting is not None:
            other, partner = self._waiting
            self._waiting = None
            partner.set_result(handoff)
            log.warning("fault hook: swapped handoffs %s and %s",
                        handoff.remote_request_id, other.remote_request_id)  # fmt: skip
            return other
        partner = asyncio.get_running_loop().create_future()
        self._waiting = (handoff, partner)
        try:
            return await asyncio.wait_for(asyncio.shield(partner), self._pair_wait_s)
        except TimeoutError:
            if self._waiting is not None and self._waiting[1] is partner:
                self._waiting = None
            return handoff
