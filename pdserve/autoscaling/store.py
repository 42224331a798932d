"""Where each pool's `PoolScaling` document lives: Ray's GCS key-value store (adapter).

The pool's policy, in Ray Serve's controller, publishes; every router replica reads (and so
`/metrics`, `/v1/pdserve/replicas` and `pdserve top`). Both run as Ray workers of the same
cluster, so no extra process or port is needed. Keys live as long as the Ray cluster.
"""

from __future__ import annotations

from pydantic import ValidationError

from pdserve.autoscaling.journal import PoolScaling
from pdserve.names import PoolName

NAMESPACE = "pdserve"


def _key(app_name: str, pool: PoolName) -> bytes:
    return f"scaling/{app_name}/{pool}".encode()


def publish(app_name: str, doc: PoolScaling) -> None:
    """Store `doc` as the pool's current state (overwrites; one GCS round trip)."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(
        _key(app_name, doc.pool), doc.model_dump_json().encode(), True, namespace=NAMESPACE
    )


def read(app_name: str, pool: PoolName) -> PoolScaling | None:
    """The pool's latest document; None when its policy has published nothing (yet), or
    outside a Ray worker."""
    from ray.experimental import internal_kv

    if not internal_kv._internal_kv_initialized():
        return None
    raw = internal_kv._internal_kv_get(_key(app_name, pool), namespace=NAMESPACE)
    if raw is None:
        return None
    try:
        return PoolScaling.model_validate_json(raw)
    except ValidationError:
        return None
