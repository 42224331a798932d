"""The identity check's prompts, comparison rules and report (pure)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pdserve.bench.gpu_check.identity import (
    PROMPT_WORDS,
    Generation,
    Prompt,
    compare,
    identity_prompts,
    report,
)

PROMPT = Prompt("p0", "completions", False, "Case 0: hello")


def gen(
    tokens: str,
    top: list[Mapping[str, float]] | None = None,
    prompt_tokens: int | None = 10,
    text: str | None = None,
    error: str | None = None,
) -> Generation:
    """A generation of one-character tokens; `top` defaults to each token at logprob -0.1."""
    toks = tuple(tokens)
    tops = tuple(top) if top is not None else tuple({t: -0.1} for t in toks)
    return Generation(toks, tops, tokens if text is None else text, prompt_tokens, error)


def test_prompts_are_deterministic_and_varied() -> None:
    prompts = identity_prompts()
    assert prompts == identity_prompts()
    assert len(prompts) == len(PROMPT_WORDS)
    assert [p.api for p in prompts[:4]] == ["completions", "chat", "completions", "chat"]
    assert [p.stream for p in prompts[:4]] == [False, False, True, True]
    assert len({p.name for p in prompts}) == len(prompts)
    assert len({p.text.split()[1] for p in prompts}) == len(prompts)  # no shared prefix
    assert max(len(p.text.split()) for p in prompts) == max(PROMPT_WORDS) + 2
    assert identity_prompts(seed=1) != prompts
    assert len(identity_prompts(3)) == 3


TIE_TOP: list[Mapping[str, float]] = [{"a": -0.1}, {"b": -0.6, "x": -0.8}]
TIE_TOP_GOT: list[Mapping[str, float]] = [{"a": -0.1}, {"x": -0.6, "b": -0.7}]


@pytest.mark.parametrize(
    ("ref", "got", "verdict", "first_diff", "detail"),
    [
        (gen("abc"), gen("abc"), "identical", None, "3 tokens"),
        (gen("abc"), gen("abc", error="HTTP 500"), "error", None, "pdserve: HTTP 500"),
        (gen("abc", error="down"), gen("abc"), "error", None, "reference: down"),
        (gen("abc"), gen("abc", prompt_tokens=11), "different", None, "prompt tokens differ"),
        (gen("abc"), gen("abc", text="abd"), "different", None, "same tokens but different"),
        (gen("abc"), gen("ab"), "different", 2, "lengths differ"),
        # A near tie at token 1: each token is in the other's top list, gap 0.2 nats.
        (gen("ab", TIE_TOP), gen("ax", TIE_TOP_GOT), "near_tie", 1, "logprob gap 0.200"),
        # The same split with a gap above the limit.
        (
            gen("ab", [{"a": -0.1}, {"b": -0.1, "x": -0.9}]),
            gen("ax", TIE_TOP_GOT),
            "different",
            1,
            "gap 0.800 nats",
        ),
        # pdserve's token is nowhere in the reference's top list: a wrong KV, not a tie.
        (gen("ab"), gen("az"), "different", 1, "not in each other's top logprobs"),
        # No logprobs at all (a server that ignored the request): cannot excuse a split.
        (gen("ab", []), gen("ax", []), "different", 1, "not in each other's top logprobs"),
    ],
)
def test_compare(
    ref: Generation, got: Generation, verdict: str, first_diff: int | None, detail: str
) -> None:
    result = compare(PROMPT, ref, got, max_tie_gap=0.5)
    assert result.verdict == verdict
    assert result.first_diff == first_diff
    assert detail in result.detail
    assert (result.prompt, result.api, result.stream) == ("p0", "completions", False)


@pytest.mark.parametrize(
    ("verdicts", "max_near_ties", "passed"),
    [
        (("identical", "identical"), 0, True),
        (("identical", "near_tie"), 1, True),
        (("identical", "near_tie"), 0, False),
        (("identical", "different"), 5, False),
        (("identical", "error"), 5, False),
        ((), 5, False),
    ],
)
def test_report(verdicts: tuple[str, ...], max_near_ties: int, passed: bool) -> None:
    ref, got = gen("ab", TIE_TOP), gen("ax", TIE_TOP_GOT)
    by_verdict = {
        "identical": (ref, ref),
        "near_tie": (ref, got),
        "different": (ref, gen("az")),
        "error": (ref, gen("", error="x")),
    }
    comparisons = [compare(PROMPT, *by_verdict[v], max_tie_gap=0.5) for v in verdicts]
    assert [c.verdict for c in comparisons] == list(verdicts)
    doc = report(comparisons, kv_transfers=2.0, max_near_ties=max_near_ties)
    assert doc["passed"] is passed
    assert doc["num_prompts"] == len(verdicts)
    assert sum(doc["counts"].values()) == len(verdicts)
    assert set(doc["counts"]) == {"identical", "near_tie", "different", "error"}
    assert doc["kv_transfers"] == 2.0
    assert [p["verdict"] for p in doc["prompts"]] == list(verdicts)
