"""Token identity: pdserve's disaggregated output against one aggregated vLLM server.

The same fixed prompts (lengths from a few tokens to ~2,800, completions and chat, unary and
streamed) go to both servers greedily (temperature 0) with the top-5 logprobs of every
generated token. `compare` (pure) classifies each prompt:

* ``identical``: same prompt length, same generated tokens and text;
* ``near_tie``: the outputs agree up to a position where each server's token is among the
  other's top-5 and the reference ranks the two within `max_tie_gap` nats of each other;
  after that point they may differ. In bfloat16 two correct servers can split there (a
  different kernel or batch shape rounds differently); a wrong or missing KV transfer
  changes the output outright, which this does not excuse (vLLM's own tests compare
  greedy outputs the same way);
* ``different``: anything else, including a different prompt length (the router must render
  and tokenize exactly like vLLM);
* ``error``: a request failed on either server.

`fetch` (the adapter) talks to a server through the official `openai` client.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from pdserve.bench.words import WORDS

if TYPE_CHECKING:
    import openai

Api = Literal["completions", "chat"]
Verdict = Literal["identical", "near_tie", "different", "error"]
REPORT_VERSION = 1
MAX_TOKENS = 32
TOP_LOGPROBS = 5
MAX_TIE_GAP_NATS = 0.5
# Prompt lengths in words (the demo tokenizer makes ~1.13 tokens of a word): ~11 to ~2,800
# tokens, within max_model_len 4096 with the completion.
PROMPT_WORDS = (10, 120, 400, 900, 1500, 2500, 60, 1200)


@dataclass(frozen=True)
class Prompt:
    """One identity prompt: `text` is the completion prompt or the user message."""

    name: str
    api: Api
    stream: bool
    text: str


@dataclass(frozen=True)
class Generation:
    """What one server generated for one prompt. `top[i]` maps token -> logprob at position
    i (empty when the server returned no logprobs); `error` is set when the request failed."""

    tokens: tuple[str, ...]
    top: tuple[Mapping[str, float], ...]
    text: str
    prompt_tokens: int | None
    error: str | None = None


@dataclass(frozen=True)
class Comparison:
    """The verdict for one prompt; `first_diff` is the first differing token position."""

    prompt: str
    api: Api
    stream: bool
    prompt_tokens: int | None
    verdict: Verdict
    first_diff: int | None
    detail: str


def identity_prompts(num_prompts: int = len(PROMPT_WORDS), seed: int = 0) -> tuple[Prompt, ...]:
    """`num_prompts` deterministic prompts; each starts differently (no shared cached prefix),
    APIs alternate chat/completions, every other pair streams."""
    rng = random.Random(f"pdserve-gpu-check-identity-{seed}")
    prompts = []
    for i in range(num_prompts):
        num_words = PROMPT_WORDS[i % len(PROMPT_WORDS)]
        body = " ".join(rng.choice(WORDS) for _ in range(num_words))
        api: Api = "completions" if i % 2 == 0 else "chat"
        name = f"p{i}-{api}-{num_words}w"
        prompts.append(Prompt(name, api, stream=(i // 2) % 2 == 1, text=f"Case {i}: {body}"))
    return tuple(prompts)


def _first_diff(a: Sequence[str], b: Sequence[str]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(prompt: Prompt, ref: Generation, got: Generation, max_tie_gap: float) -> Comparison:
    """Classify `got` (pdserve) against `ref` (aggregated vLLM) for one prompt (pure)."""

    def result(verdict: Verdict, first: int | None, detail: str) -> Comparison:
        return Comparison(
            prompt.name, prompt.api, prompt.stream, ref.prompt_tokens, verdict, first, detail
        )

    if ref.error is not None or got.error is not None:
        return result(
            "error", None, f"reference: {ref.error or 'ok'}; pdserve: {got.error or 'ok'}"
        )
    if ref.prompt_tokens != got.prompt_tokens:
        return result(
            "different",
            None,
            f"prompt tokens differ: reference {ref.prompt_tokens}, pdserve {got.prompt_tokens}",
        )
    first = _first_diff(ref.tokens, got.tokens)
    if first is None:
        if ref.text == got.text:
            return result("identical", None, f"{len(ref.tokens)} tokens")
        return result("different", None, "same tokens but different text")
    if first >= min(len(ref.tokens), len(got.tokens)):
        return result("different", first, f"lengths differ: {len(ref.tokens)} vs {len(got.tokens)}")
    ref_token, got_token = ref.tokens[first], got.tokens[first]
    ref_top = ref.top[first] if first < len(ref.top) else {}
    got_top = got.top[first] if first < len(got.top) else {}
    mutual = got_token in ref_top and ref_token in got_top
    gap = ref_top[ref_token] - ref_top[got_token] if mutual and ref_token in ref_top else None
    where = f"token {first}: reference {ref_token!r}, pdserve {got_token!r}"
    if gap is not None and gap <= max_tie_gap:
        return result("near_tie", first, f"{where}, reference logprob gap {gap:.3f}")
    why = f"gap {gap:.3f} nats" if gap is not None else "not in each other's top logprobs"
    return result("different", first, f"{where} ({why})")


def _completion(client: openai.OpenAI, model: str, prompt: Prompt) -> Generation:
    common: dict[str, Any] = {
        "model": model,
        "prompt": prompt.text,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "logprobs": TOP_LOGPROBS,
        "extra_body": {"ignore_eos": True},
    }
    tokens: list[str] = []
    top: list[Mapping[str, float]] = []
    text: list[str] = []
    prompt_tokens = None
    if prompt.stream:
        chunks: Iterable[Any] = client.completions.create(
            stream=True, stream_options={"include_usage": True}, **common
        )
    else:
        chunks = [client.completions.create(**common)]
    for chunk in chunks:
        if chunk.usage is not None:
            prompt_tokens = chunk.usage.prompt_tokens
        for choice in chunk.choices:
            text.append(choice.text or "")
            if choice.logprobs is not None:
                tokens.extend(choice.logprobs.tokens or [])
                top.extend(dict(t or {}) for t in choice.logprobs.top_logprobs or [])
    return Generation(tuple(tokens), tuple(top), "".join(text), prompt_tokens)


def _chat(client: openai.OpenAI, model: str, prompt: Prompt) -> Generation:
    common: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt.text}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
        "extra_body": {"ignore_eos": True},
    }
    tokens: list[str] = []
    top: list[Mapping[str, float]] = []
    text: list[str] = []
    prompt_tokens = None
    if prompt.stream:
        stream = client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **common
        )
        for chunk in stream:
            if chunk.usage is not None:
                prompt_tokens = chunk.usage.prompt_tokens
            for delta_choice in chunk.choices:
                text.append(delta_choice.delta.content or "")
                items = delta_choice.logprobs.content if delta_choice.logprobs else None
                for item in items or []:
                    tokens.append(item.token)
                    top.append({t.token: t.logprob for t in item.top_logprobs})
    else:
        resp = client.chat.completions.create(**common)
        prompt_tokens = resp.usage.prompt_tokens if resp.usage is not None else None
        choice = resp.choices[0]
        text.append(choice.message.content or "")
        for item in (choice.logprobs.content if choice.logprobs else None) or []:
            tokens.append(item.token)
            top.append({t.token: t.logprob for t in item.top_logprobs})
    return Generation(tuple(tokens), tuple(top), "".join(text), prompt_tokens)


def fetch(
    base_url: str, model: str, prompts: Sequence[Prompt], timeout_s: float
) -> dict[str, Generation]:
    """Send every prompt to the server at `base_url` (no /v1), one at a time; a failed request
    is recorded as a Generation with `error`, never raised."""
    import openai

    client = openai.OpenAI(
        base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=timeout_s
    )
    out: dict[str, Generation] = {}
    with client:
        for prompt in prompts:
            try:
                call = _completion if prompt.api == "completions" else _chat
                out[prompt.name] = call(client, model, prompt)
            except openai.OpenAIError as exc:
                out[prompt.name] = Generation((), (), "", None, error=str(exc)[:300])
    return out


def report(
    comparisons: Sequence[Comparison],
    kv_transfers: float | None,
    max_near_ties: int,
) -> dict[str, Any]:
    """The identity JSON document (REPORT_VERSION 1). `passed`: no `different` or `error`
    prompt and at most `max_near_ties` near ties. `kv_transfers`: completed KV handoffs the
    router counted during the check (None if its /metrics could not be read)."""
    counts = {v: sum(c.verdict == v for c in comparisons) for v in get_args(Verdict)}
    passed = (
        bool(comparisons)
        and counts["different"] == 0
        and counts["error"] == 0
        and counts["near_tie"] <= max_near_ties
    )
    return {
        "report_version": REPORT_VERSION,
        "passed": passed,
        "num_prompts": len(comparisons),
        "counts": counts,
        "max_near_ties": max_near_ties,
        "kv_transfers": kv_transfers,
        "prompts": [asdict(c) for c in comparisons],
    }
