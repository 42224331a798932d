"""What the simulator knows about the hardware: the fitted cost model plus the serving
layer's fixed latencies (pure data).

Written by `pdserve profile --sim-profile PATH` from measurements of the running engines and
read by `pdserve tune` / the simulator. Every field is seconds (or seconds per token).
"""

from __future__ import annotations

import pathlib

from pydantic import Field

from pdserve.router.policy.cost_model import CostModel
from pdserve.router.policy.strict import StrictModel

SIM_PROFILE_VERSION = 1


class SimProfile(StrictModel):
    """Step-time model of one engine (prefill and decode) and the fixed serving latencies.

    `cost_model` gives an engine step's time: the prefill chunks it computes (per token and
    attention terms; `fixed_overhead_s` once per prompt) and, when it decodes, the decode
    step (base + per sequence + per context token). The other fields are what the serving
    layer adds around the engines, measured from the router's per-request timeline.
    """

    version: int = Field(default=SIM_PROFILE_VERSION, description="Format version.")
    cost_model: CostModel = Field(
        default_factory=CostModel, description="Engine step times (see CostModel)."
    )
    router_s: float = Field(
        default=0.002,
        ge=0,
        description="Router time before a request is dispatched (parse, tokenize, place).",
    )
    hop_s: float = Field(
        default=0.003,
        ge=0,
        description="One router -> replica call or reply (Ray Serve hop), each way.",
    )
    kv_transfer_fixed_s: float = Field(
        default=0.01,
        ge=0,
        description=(
            "KV transfer time a prompt pays whatever its length (NIXL handshake and the pull's "
            "polling floor); the per-token term is cost_model.kv_transfer_per_token_s."
        ),
    )
    source: str = Field(default="defaults", description="Where the numbers came from.")

    def kv_transfer_s(self, num_tokens: int) -> float:
        """Seconds to move `num_tokens` tokens' KV from a prefill to a decode engine."""
        return self.kv_transfer_fixed_s + self.cost_model.est_transfer_s(num_tokens)

    @classmethod
    def load(cls, path: pathlib.Path) -> SimProfile:
        """Read a profile JSON file (ValueError naming the file when it is not one)."""
        try:
            return cls.model_validate_json(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a pdserve simulator profile ({exc})") from exc
