"""The `agent` workload: conversations that grow every step (pure state transitions).

Agent a starts with a system prompt (unique tag first) and a task, ≈ `--initial-tokens`.
Each step sends the whole conversation; then the reply is appended as an assistant turn and
a tool result of ≈ `--tool-result-tokens` follows. With prefix reuse, step k+1 only needs to
prefill what step k added; without it, it prefills the whole context again. Every step names
its conversation (`key`, the x-pdserve-conversation header), so pdserve reports where a step
stopped repeating the previous one. `--agent-cache-breaker timestamp` starts the system prompt
with the send time, the classic way to break the prefix cache on every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import ChatMessage, RequestSpec
from pdserve.bench.prompts import PromptFactory

CLASS = "agent"
TASK_SHARE = 0.25  # of the initial tokens; the system prompt takes the rest


@dataclass(frozen=True)
class AgentConversation:
    """One agent's conversation before step `step` (0-based)."""

    agent: int
    step: int
    messages: tuple[ChatMessage, ...]
    key: str = ""
    """The conversation's key (unique per phase and agent)."""


def start_conversation(
    agent: int, cfg: BenchConfig, factory: PromptFactory, key: str = ""
) -> AgentConversation:
    """System prompt + task, ≈ `cfg.initial_tokens` tokens including the template overhead."""
    budget = max(2.0, cfg.initial_tokens - factory.calibration.overhead_tokens)
    task_tokens = max(1.0, budget * TASK_SHARE)
    system = f"{factory.tag(f'agent:{agent}')} You are agent {agent}. " + factory.text(
        f"agent:{agent}:system", budget - task_tokens
    )
    task = "Task: " + factory.text(f"agent:{agent}:task", task_tokens)
    return AgentConversation(
        agent=agent,
        step=0,
        messages=(ChatMessage("system", system), ChatMessage("user", task)),
        key=key,
    )


def step_request(conv: AgentConversation, cfg: BenchConfig, now_unix_s: float) -> RequestSpec:
    """The chat request of the conversation's current step, sent at `now_unix_s`."""
    messages = conv.messages
    if cfg.cache_breaker == "timestamp":
        system, *rest = messages
        stamp = datetime.fromtimestamp(now_unix_s, UTC).isoformat(timespec="microseconds")
        messages = (ChatMessage("system", f"Current time: {stamp}. {system.content}"), *rest)
    return RequestSpec(
        index=conv.agent * cfg.steps + conv.step,
        request_class=CLASS,
        max_tokens=cfg.output_tokens,
        target_prompt_tokens=0,  # grows with the conversation; the server reports it
        messages=messages,
        agent=conv.agent,
        step=conv.step,
        conversation=conv.key or None,
    )


def advance(
    conv: AgentConversation, reply: str, cfg: BenchConfig, factory: PromptFactory
) -> AgentConversation:
    """Append the assistant reply and a tool result; the next step's conversation."""
    result = factory.text(f"agent:{conv.agent}:tool:{conv.step}", cfg.tool_result_tokens)
    call_id = f"call_{conv.agent}_{conv.step}"
    tool = (
        ChatMessage("tool", result, tool_call_id=call_id)
        if cfg.tool_role == "tool"
        else ChatMessage("user", f"Tool result: {result}")
    )
    assistant = ChatMessage("assistant", reply or "(empty reply)")
    return AgentConversation(
        agent=conv.agent,
        step=conv.step + 1,
        messages=(*conv.messages, assistant, tool),
        key=conv.key,
    )
