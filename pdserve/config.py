"""The one deployment config: model, prefill and decode pools, KV transfer, router.

This module holds the top level (`PdserveConfig`, with the model and KV transfer blocks, their
cross-field rules, and loading); each pool's block is `pdserve.pool_config.PoolConfig` (with its
`EngineConfig`) and the `router:` block is `pdserve.router_config.RouterConfig`.
One YAML file describes a deployment. The CLI (`pdserve up`), Ray Serve's `serve run` (through
`pdserve.deploy.app:build_app`) and the Helm chart all consume this schema. Pure data: no I/O
beyond `load_config`, which reads one file.
"""

from __future__ import annotations

import pathlib
from typing import Any, Literal, Self

import yaml
from pydantic import Field, ValidationError, model_validator

from pdserve.autoscaling.config import AutoscalingConfig
from pdserve.names import POOLS, PoolName
from pdserve.pool_config import PoolConfig
from pdserve.router.policy.strict import StrictModel
from pdserve.router_config import (
    AdmissionConfig,
    AuthConfig,
    DeadlineConfig,
    FallbackConfig,
    RouterConfig,
)

__all__ = [
    "AdmissionConfig",
    "AuthConfig",
    "AutoscalingConfig",
    "DeadlineConfig",
    "FallbackConfig",
    "RouterConfig",
]

DEMO_MODEL_ID = "pdserve-demo"


class ModelConfig(StrictModel):
    """Which model both pools serve (they must serve the same one)."""

    source: str = Field(
        default="demo",
        description=(
            "'demo' for the built-in tiny model made locally, a local Hugging Face model "
            "folder, or a hub id (only where the machine has internet)."
        ),
    )
    served_model_name: str = Field(
        default=DEMO_MODEL_ID, min_length=1, description="Model id clients send as `model`."
    )
    demo_model_dir: str = Field(
        default="~/.cache/pdserve/demo-model",
        description="Where the demo model is created when source is 'demo'.",
    )
    max_model_len_tokens: int = Field(
        default=4096, gt=0, description="Context window (prompt + completion) in tokens."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="Weights/activation dtype passed to vLLM."
    )
    seed: int = Field(default=0, description="Engine seed (same on every replica).")


class KVTransferConfig(StrictModel):
    """How KV moves from prefill to decode (vLLM NixlConnector over NIXL)."""

    connector: Literal["NixlConnector"] = Field(
        default="NixlConnector", description="vLLM KV connector."
    )
    buffer_device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="NIXL buffer device; auto = cuda on GPU, cpu otherwise."
    )
    kv_events_base_port: int = Field(
        default=16600,
        ge=1024,
        le=65000,
        description="First port of the engines' KV-event publishers (one per replica).",
    )
    side_channel_base_port: int = Field(
        default=15600,
        ge=1024,
        le=65000,
        description="First NIXL side-channel port; each replica takes the next free one.",
    )
    side_channel_host: str = Field(
        default="auto",
        description=(
            "Address other replicas reach this replica's NIXL side channel on; 'auto' = "
            "the node's address: loopback on a single-machine `pdserve up`, the address "
            "`pdserve up --head` / `pdserve join` chose (--node-ip, else the one Ray detects), "
            "the pod IP under the Helm chart. An explicit value applies to every replica on "
            "every node (per node, use `--node-ip` on up/join)."
        ),
    )
    backends: list[str] = Field(default_factory=lambda: ["UCX"], description="NIXL backends.")
    num_threads: int = Field(default=1, ge=1, description="NIXL/UCX worker threads per engine.")
    progress_thread: bool = Field(
        default=False,
        description=(
            "CPU only: run NIXL's UCX progress thread (it busy-polls one core per engine). "
            "Off by default on CPU, where the engine loop progresses transfers itself; GPU "
            "nodes always keep NIXL's default."
        ),
    )
    kv_lease_seconds: int = Field(
        default=30,
        ge=6,
        description=(
            "The lease (vLLM's kv_connector_extra_config.kv_lease_duration): a prefill engine "
            "frees a request's KV this many seconds after its prefill unless a decode engine "
            "pulled it, released it, or renewed the lease. A decode engine's scheduler renews "
            "it by heartbeat (every lease/6 s) from the moment it receives the request, so "
            "the lease only has to cover the end of prefill → arrival at the decode engine "
            "(router, replica queue, a stalled decode engine). Whole seconds, at least 6 "
            "(vLLM's heartbeat interval is lease // 6)."
        ),
    )
    verify: str = Field(
        default="all",
        pattern=r"^(all|off|sample:(0(\.[0-9]+)?|1(\.0+)?))$",
        description=(
            "Check every KV handoff before decode uses it (docs/kv-integrity.md): `all` (the "
            "default), `sample:P` (a random fraction P of remote prefills, e.g. sample:0.1), "
            "or `off` (vLLM's plain NixlConnector, no checks). A checked handoff carries the "
            "prompt's identity and a 64-bit digest of each KV block from the prefill engine; "
            "the decode engine recomputes the prompt (from the first bad block) instead of "
            "decoding from blocks whose digest, identity or lease does not match."
        ),
    )
    load_failure_policy: Literal["recompute", "fail"] = Field(
        default="recompute",
        description=(
            "A decode engine that cannot load a request's KV (NIXL error, lease expired, "
            "prefill engine gone): `recompute` the prompt on the decode engine (vLLM "
            "kv_load_failure_policy; counted in pdserve_kv_transfer_failures_total"
            '{pool="decode"}), or `fail` the request (502 decode_failed).'
        ),
    )
    ucx_env: dict[str, str] = Field(
        default_factory=dict,
        description="UCX_* environment for engines (e.g. UCX_TLS); empty = UCX defaults.",
    )

    @property
    def verify_fraction(self) -> float:
        """The share of remote prefills whose handoff is checked: 1.0 (`all`), 0.0 (`off`),
        or P (`sample:P`)."""
        if self.verify == "all":
            return 1.0
        if self.verify == "off":
            return 0.0
        return float(self.verify.removeprefix("sample:"))


DeploymentMode = Literal["disaggregated", "aggregated"]


class PdserveConfig(StrictModel):
    """A whole deployment."""

    mode: DeploymentMode = Field(
        default="disaggregated",
        description=(
            "'disaggregated': a prefill pool computes prompts and ships their KV over NIXL to "
            "the decode pool. 'aggregated': no prefill pool and no KV connector; the decode "
            "pool's engines prefill and decode every request themselves (the baseline that "
            "shows what disaggregation buys), behind the same router, policy, metrics and API. "
            "Omit the `prefill` block in this mode (a non-default one is an error)."
        ),
    )
    platform: Literal["cpu", "cuda"] = Field(default="cpu", description="Engine build in use.")
    app_name: str = Field(default="pdserve", description="Ray Serve application name.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Served model.")
    prefill: PoolConfig = Field(default_factory=PoolConfig, description="Prefill pool.")
    decode: PoolConfig = Field(default_factory=PoolConfig, description="Decode pool.")
    kv_transfer: KVTransferConfig = Field(
        default_factory=KVTransferConfig, description="KV transfer."
    )
    router: RouterConfig = Field(default_factory=RouterConfig, description="HTTP router.")

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        if self.mode == "aggregated" and self.prefill != PoolConfig():
            raise ValueError(
                "mode 'aggregated' has no prefill pool: remove the `prefill` block (the decode "
                "pool's engines prefill and decode; size it with decode.num_replicas)"
            )
        wait = self.router.deadlines.busy_replica_wait_seconds
        if wait >= self.kv_transfer.kv_lease_seconds:
            raise ValueError(
                f"router.deadlines.busy_replica_wait_seconds ({wait}) must be below "
                f"kv_transfer.kv_lease_seconds ({self.kv_transfer.kv_lease_seconds}): a "
                "decode that waits longer finds its KV freed"
            )
        if self.platform == "cpu" and self.kv_transfer.buffer_device == "cuda":
            raise ValueError("kv_transfer.buffer_device 'cuda' needs platform 'cuda'")
        for role in POOLS:
            pool = self.pool(role)
            if pool.cpu_cores is not None and pool.cpu_cores_per_replica is not None:
                raise ValueError(f"{role}: set cpu_cores or cpu_cores_per_replica, not both")
            if pool.cpu_cores_per_replica is not None and not all(pool.cpu_cores_per_replica):
                raise ValueError(f"{role}.cpu_cores_per_replica: every entry needs a core")
            if pool.autoscaling is not None:
                pool.autoscaling.check_pool(role)
            tp = pool.engine.tensor_parallel_size
            shares_one_gpu = tp == 1 and 0 < pool.num_gpus < 1  # e.g. 1P1D on one GPU
            if self.platform == "cuda" and pool.num_gpus < tp and not shares_one_gpu:
                raise ValueError(
                    f"{role}.num_gpus ({pool.num_gpus}) must cover tensor_parallel_size ({tp}) "
                    "on cuda, or be a share of one GPU (0 < num_gpus < 1) with "
                    "tensor_parallel_size 1"
                )
            eng = pool.engine
            longest = self.model.max_model_len_tokens - 1
            if eng.warmup_prompt_tokens is not None and eng.warmup_prompt_tokens > longest:
                raise ValueError(
                    f"{role}.engine.warmup_prompt_tokens ({eng.warmup_prompt_tokens}) must be "
                    f"at most model.max_model_len_tokens - 1 ({longest}): the warm-up prompt "
                    "and its one output token must fit the context window"
                )
            if not eng.enable_chunked_prefill and (
                eng.max_num_batched_tokens < self.model.max_model_len_tokens
            ):
                raise ValueError(
                    f"{role}.engine.max_num_batched_tokens ({eng.max_num_batched_tokens}) must "
                    f"be >= model.max_model_len_tokens ({self.model.max_model_len_tokens}) "
                    "when chunked prefill is off"
                )
        return self

    @property
    def pools(self) -> tuple[PoolName, ...]:
        """The pools this deployment runs: both, or only decode in aggregated mode."""
        return ("decode",) if self.mode == "aggregated" else POOLS

    @property
    def aggregated(self) -> bool:
        """No prefill pool: the decode engines prefill every prompt themselves."""
        return self.mode == "aggregated"

    def pool(self, role: PoolName) -> PoolConfig:
        """The config of the pool that `role` names."""
        return self.prefill if role == "prefill" else self.decode

    @property
    def kv_buffer_device(self) -> Literal["cpu", "cuda"]:
        """The NIXL buffer device after resolving 'auto'."""
        if self.kv_transfer.buffer_device == "auto":
            return "cuda" if self.platform == "cuda" else "cpu"
        return self.kv_transfer.buffer_device


class ConfigError(ValueError):
    """A config file that cannot be used; the message says what to fix."""


def parse_config(data: dict[str, Any], *, origin: str = "config") -> PdserveConfig:
    """Validate a config mapping; raise ConfigError naming every bad field."""
    try:
        return PdserveConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{origin}: {problems}") from exc


def load_config(path: pathlib.Path) -> PdserveConfig:
    """Read and validate one YAML config file."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(raw).__name__}")
    _anchor_key_file(raw, path.parent)
    return parse_config(raw, origin=str(path))


def _anchor_key_file(raw: dict[str, Any], config_dir: pathlib.Path) -> None:
    """A relative router.auth.api_key_file is relative to the config file's folder (the
    router replicas run in other working directories)."""
    router = raw.get("router")
    auth = router.get("auth") if isinstance(router, dict) else None
    if not isinstance(auth, dict):
        return
    key_file = auth.get("api_key_file")
    if isinstance(key_file, str) and key_file:
        path = pathlib.Path(key_file).expanduser()
        if not path.is_absolute():
            auth["api_key_file"] = str((config_dir / path).resolve())
