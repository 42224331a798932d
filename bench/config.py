"""`BenchConfig`: every option of `pdserve bench`, validated (pydantic v2, pure)."""

from __future__ import annotations

import pathlib
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from pdserve.bench.distributions import Distribution, parse_distribution
from pdserve.router.policy.strict import StrictModel

Workload = Literal["mixed", "agent", "synthetic", "trace"]
DEFAULT_POLICY = "default"
KV_VERIFY_PHASES = ("kv-verify:on", "kv-verify:off")
ITL_GUARD_PHASES = ("itl-guard:on", "itl-guard:off")
PACE_PHASES = ("pace:on", "pace:off")
"""--compare phases that turn the KV check on or off (bench/payload.py sends the header)."""


REPORT_DIR_DESCRIPTION = (
    "Write an HTML report (index.html, charts inline, opens offline) and the JSON it was "
    "drawn from (data.json) into this folder."
)
"""The `--report DIR` option of every bench command (pdserve.report draws the page)."""


class BenchConfig(StrictModel):
    """The whole run configuration; written as `config` into the JSON report."""

    url: str = Field(default="http://127.0.0.1:8000", description="Server base URL (no /v1).")
    workload: Workload = Field(default="mixed", description="Which workload to generate.")
    model: str | None = Field(default=None, description="Model id; None: first of /v1/models.")
    seed: int = Field(default=0, description="Seed of every random choice (lengths, arrivals).")
    num_requests: int = Field(default=200, gt=0, description="Requests (mixed, synthetic).")
    concurrency: int = Field(default=8, gt=0, description="Most requests in flight at once.")
    request_rate: float | None = Field(
        default=None, gt=0, description="Poisson arrivals per second; None: closed loop."
    )
    output_tokens: int = Field(default=32, gt=0, description="max_tokens (mixed, agent).")
    short_tokens: int = Field(default=50, gt=0, description="Prompt tokens of `short` (mixed).")
    long_tokens: int = Field(default=1500, gt=0, description="Prompt tokens of `long` (mixed).")
    long_fraction: float = Field(default=0.5, ge=0, le=1, description="Share of long requests.")
    burst_size: int = Field(default=4, gt=0, description="Long requests sent back-to-back.")
    agents: int = Field(default=4, gt=0, description="Concurrent agents (agent).")
    steps: int = Field(default=6, gt=0, description="Steps per agent (agent).")
    initial_tokens: int = Field(default=500, gt=0, description="System prompt + task tokens.")
    tool_result_tokens: int = Field(default=400, gt=0, description="Tokens per tool result.")
    tool_role: Literal["tool", "user"] = Field(
        default="tool", description="Role of tool results; `user` prefixes 'Tool result:'."
    )
    cache_breaker: Literal["none", "timestamp"] = Field(
        default="none",
        description=(
            "Agent: inject a cache breaker into every step; `timestamp` starts the system "
            "prompt with the current time (a common mistake: every step's prefix changes)."
        ),
    )
    input_dist: str = Field(default="uniform:100:2000", description="Input lengths (synthetic).")
    output_dist: str = Field(default="uniform:16:64", description="Output lengths (synthetic).")
    trace: pathlib.Path | None = Field(default=None, description="Mooncake-format JSONL trace.")
    trace_time_scale: float = Field(default=1.0, gt=0, description="Multiplies inter-arrivals.")
    trace_block_tokens: int = Field(default=512, gt=0, description="Tokens per trace hash id.")
    trace_length_scale: float = Field(
        default=1.0, gt=0, description="Multiplies input lengths and block size together."
    )
    max_requests: int | None = Field(default=None, gt=0, description="Cap on trace requests.")
    max_input_tokens: int | None = Field(
        default=None, gt=0, description="Longest prompt sent (trace, synthetic)."
    )
    max_output_tokens: int | None = Field(
        default=None, gt=0, description="Largest max_tokens sent (trace, synthetic)."
    )
    clip_mode: Literal["clip", "skip"] = Field(
        default="clip", description="Over-long prompts: clip them or skip the request."
    )
    token_ids: bool = Field(default=False, description="Send token-id prompts (completions).")
    warmup: int = Field(
        default=2,
        ge=0,
        description=(
            "Unmeasured requests before each phase, of each prompt length in "
            "`warmup_prompt_tokens` (mixed: short and long), each length's sent at once."
        ),
    )
    request_timeout_s: float = Field(default=300.0, gt=0, description="Per-request time limit.")
    slo_ttft_s: float = Field(default=2.0, gt=0, description="Goodput SLO on TTFT.")
    slo_tpot_s: float = Field(default=0.5, gt=0, description="Goodput SLO on TPOT.")
    policies: tuple[str, ...] = Field(
        default=(),
        description=(
            "--compare: x-pdserve-policy values, one phase each; `kv-verify:on` and "
            "`kv-verify:off` keep the router's policy and turn the KV check on or off; "
            "`itl-guard:on` and `itl-guard:off` the ITL guard; `pace:on` and `pace:off` the "
            "measured pace."
        ),
    )
    deployments: tuple[str, ...] = Field(
        default=(),
        description=(
            "--deployments: NAME=CONFIG pairs. The bench starts each pdserve deployment from "
            "its YAML config itself (`pdserve up` on private ports, --url unused), runs the "
            "workload against it, stops it, and goes on to the next, so every deployment gets "
            "the same machine alone; phases are named by NAME."
        ),
    )
    rounds: int = Field(default=1, gt=0, description="Alternations of the compared phases.")
    json_path: pathlib.Path | None = Field(default=None, description="Write the JSON report.")
    report_dir: pathlib.Path | None = Field(default=None, description=REPORT_DIR_DESCRIPTION)

    @field_validator("input_dist", "output_dist")
    @classmethod
    def _dist(cls, value: str) -> str:
        parse_distribution(value)
        return value

    @field_validator("policies")
    @classmethod
    def _policies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not p or p != p.strip() for p in value):
            raise ValueError(f"--compare names must be non-empty without spaces: {value}")
        if len(set(value)) != len(value):
            raise ValueError(f"--compare names must be distinct: {value}")
        bad = [p for p in value if p.startswith("kv-verify:") and p not in KV_VERIFY_PHASES]
        if bad:
            raise ValueError(f"--compare: use kv-verify:on or kv-verify:off, not {bad}")
        bad = [p for p in value if p.startswith("itl-guard:") and p not in ITL_GUARD_PHASES]
        if bad:
            raise ValueError(f"--compare: use itl-guard:on or itl-guard:off, not {bad}")
        bad = [p for p in value if p.startswith("pace:") and p not in PACE_PHASES]
        if bad:
            raise ValueError(f"--compare: use pace:on or pace:off, not {bad}")
        return value

    @field_validator("deployments")
    @classmethod
    def _deployments(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        names = []
        for item in value:
            name, sep, path = item.partition("=")
            if not sep or not name.strip() or not path.strip() or name != name.strip():
                raise ValueError(f"--deployments wants NAME=CONFIG pairs, got {item!r}")
            if not pathlib.Path(path).is_file():
                raise ValueError(f"--deployments {name}: no config file at {path}")
            names.append(name)
        if len(set(names)) != len(names):
            raise ValueError(f"--deployments names must be distinct: {names}")
        return value

    @model_validator(mode="after")
    def _cross(self) -> Self:
        if self.deployments and self.policies:
            raise ValueError("--deployments and --compare cannot be combined: pick one")
        if self.workload == "trace" and self.trace is None:
            raise ValueError("the trace workload needs --trace PATH")
        if self.workload == "agent" and self.token_ids:
            raise ValueError("--token-ids works with completions only; agent uses chat")
        return self

    @property
    def warmup_prompt_tokens(self) -> tuple[int, ...]:
        """The prompt lengths the warm-up sends `warmup` requests of, in order (see
        `warmup_lengths`)."""
        return warmup_lengths(
            self.workload, self.short_tokens, self.long_tokens, self.long_fraction
        )

    @property
    def num_warmup_requests(self) -> int:
        """Requests the warm-up sends before each phase."""
        return self.warmup * len(self.warmup_prompt_tokens)

    @property
    def policy_names(self) -> tuple[str, ...]:
        """x-pdserve-policy phase names in order; ("default",) when not comparing policies."""
        return self.policies or (DEFAULT_POLICY,)

    @property
    def deployment_configs(self) -> dict[str, pathlib.Path]:
        """--deployments as NAME -> config path, in the given order."""
        pairs = (item.partition("=") for item in self.deployments)
        return {name: pathlib.Path(path) for name, _, path in pairs}

    @property
    def phase_names(self) -> tuple[str, ...]:
        """What the report's columns are: the deployments, else the policies."""
        return tuple(self.deployment_configs) or self.policy_names

    @property
    def input_distribution(self) -> Distribution:
        return parse_distribution(self.input_dist)

    @property
    def output_distribution(self) -> Distribution:
        return parse_distribution(self.output_dist)


def warmup_lengths(
    workload: str, short_tokens: int, long_tokens: int, long_fraction: float
) -> tuple[int, ...]:
    """The prompt lengths a phase's warm-up sends: short prompts, and for the mixed workload
    with long requests its long prompts too. A CPU engine's first prompt longer than any
    before it prefills several times slower than later ones (measured: the first burst of
    1,500-token prompts after a deployment started took 220-350 ms in prefill against a median
    of 44 ms); pdserve's engines now warm up themselves, but a server that does not (another
    stack, or `engine.warmup_prompt_tokens: 0`) would otherwise put that in every phase's
    long-request tail."""
    if workload == "mixed" and long_fraction > 0 and long_tokens != short_tokens:
        return (short_tokens, long_tokens)
    return (short_tokens,)
