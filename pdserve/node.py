"""What one Ray node of a pdserve cluster offers: which pools it carries, its address, its
cores, and the Ray resources that follow from them. Pure: `pdserve up` / `pdserve join` turn a
`NodeSpec` into `ray start` flags (pdserve.ray_node); nothing here starts a process.

Placement rule: a pool's replicas ask Ray for the custom resources in the pool's
`ray_resources` (e.g. `{pdserve_prefill: 1}`), and a node carries a pool when it advertises
them. Every pdserve node advertises the marker `pdserve_<pool>` of each pool it carries (the
same names the Helm chart's worker groups advertise), plus any other resource the config's
pools ask for, enough for the pool's largest replica count.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import Field, field_validator

from pdserve.config import PdserveConfig
from pdserve.names import POOLS, PoolName
from pdserve.pool_config import PoolConfig
from pdserve.router.policy.strict import StrictModel

# How much of its pool marker a node advertises: replicas ask for 1 each (deploy/*.yaml), so
# this caps nothing a node's CPUs or GPUs would not cap first. The Helm chart uses the same.
MARKER_AMOUNT = 100.0
# Set on `ray start` (so every worker process of the node, engines included, inherits it): the
# address this node's NIXL side channels and KV-event publishers bind and advertise.
NODE_ADDRESS_ENV = "PDSERVE_NODE_ADDRESS"
# Set by the Helm chart from the pod's status.podIP.
POD_IP_ENV = "PDSERVE_POD_IP"
LOOPBACK = "127.0.0.1"

NodeKind = Literal["single", "head", "worker"]


class NodeSpec(StrictModel):
    """One node as `pdserve up` or `pdserve join` starts it."""

    kind: NodeKind = Field(
        description=(
            "single: a one-machine cluster, every address on loopback; head: the first node of "
            "a multi-node cluster (Ray head, router); worker: a node that joined a head."
        )
    )
    pools: tuple[PoolName, ...] = Field(
        default=POOLS, min_length=0, description="Pools whose replicas may run on this node."
    )
    address: str | None = Field(
        default=None,
        description=(
            "The address other nodes reach this one on; None = the one Ray detects "
            "(single nodes always use loopback)."
        ),
    )
    cores: tuple[int, ...] | None = Field(
        default=None, description="CPU cores this node's processes run on; None = all."
    )

    @field_validator("pools")
    @classmethod
    def _known_unique(cls, pools: tuple[PoolName, ...]) -> tuple[PoolName, ...]:
        if len(set(pools)) != len(pools):
            raise ValueError(f"pools listed twice: {list(pools)}")
        return pools

    def num_cpus(self) -> int:
        """The CPUs this node gives Ray: its cores, or every core of the machine."""
        return len(self.cores) if self.cores is not None else (os.cpu_count() or 1)


def pool_marker(pool: PoolName) -> str:
    """The custom Ray resource naming a node that carries `pool`."""
    return f"pdserve_{pool}"


def max_replicas(pool: PoolConfig) -> int:
    """The most replicas the pool may run (autoscaling's bound, else its fixed count)."""
    return pool.autoscaling.max_replicas if pool.autoscaling is not None else pool.num_replicas


def node_resources(config: PdserveConfig, pools: Iterable[PoolName]) -> dict[str, float]:
    """The custom Ray resources a node carrying `pools` advertises: each pool's marker, and
    every resource the pool's replicas ask for, times the pool's largest replica count (two
    pools asking for the same name add up)."""
    resources: dict[str, float] = {}
    for name in pools:
        pool = config.pool(name)
        for key, per_replica in pool.ray_resources.items():
            resources[key] = resources.get(key, 0.0) + per_replica * max_replicas(pool)
        marker = pool_marker(name)
        resources[marker] = max(resources.get(marker, 0.0), MARKER_AMOUNT)
    return resources


def unplaceable_pools(config: PdserveConfig, advertised: Mapping[str, float]) -> list[str]:
    """One line per pool whose replicas ask for something no node of the cluster has
    (`advertised`: Ray's cluster resources): a custom resource, or GPUs. Such replicas would
    wait for placement until `up` times out. Empty when every pool can place."""
    problems = []
    for name in config.pools:
        pool = config.pool(name)
        wanted = dict(pool.ray_resources)
        if pool.num_gpus > 0:
            wanted["GPU"] = pool.num_gpus
        missing = sorted(k for k in wanted if advertised.get(k, 0.0) < wanted[k])
        if missing:
            problems.append(
                f"{name} replicas ask for {', '.join(f'{k}: {wanted[k]:g}' for k in missing)}, "
                f"which no node of the cluster has (join a node that has them with "
                f"`pdserve join HEAD --pool {name}`, or change the {name} pool's config)"
            )
    return problems


def parse_cores(text: str) -> tuple[int, ...]:
    """`0-3,6` → (0, 1, 2, 3, 6). ValueError on anything else."""
    cores: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"empty core in {text!r}")
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"not a core or range: {part!r} (e.g. 0-3,6)")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise ValueError(f"range runs backwards: {part!r}")
        cores.extend(range(first, last + 1))
    if len(set(cores)) != len(cores):
        raise ValueError(f"a core is listed twice in {text!r}")
    return tuple(cores)


def advertised_address(override: str, environ: Mapping[str, str], ray_node_ip: str | None) -> str:
    """The address a replica's engine binds and advertises for what remote peers must reach
    (NIXL side channel, KV events): `override` unless 'auto'; else the node's address that
    `pdserve up`/`join` set (PDSERVE_NODE_ADDRESS), the pod IP the Helm chart sets, or the node
    IP Ray detected; loopback outside Ray."""
    if override != "auto":
        return override
    for key in (NODE_ADDRESS_ENV, POD_IP_ENV):
        if environ.get(key):
            return environ[key]
    return ray_node_ip or LOOPBACK
