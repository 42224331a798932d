"""`pdserve context whatif`: trimming policies, prompt costing and the command, on small
conversations whose numbers are worked out by hand."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from typer.testing import CliRunner

from pdserve.cli import app
from pdserve.context.history import (
    Conversation,
    Message,
    ReportError,
    Step,
    load_conversations,
)
from pdserve.context.policies import (
    CapHistory,
    CapHistoryBatched,
    DropToolResults,
    KeepAll,
    parse_policy,
)
from pdserve.context.report import recorded_note
from pdserve.context.whatif import (
    cached_tokens,
    default_policies,
    evaluate,
    replay,
    round_cap_tokens,
)
from pdserve.router.policy.cost_model import CostModel

LINEAR = CostModel(fixed_overhead_s=0.01, per_token_s=0.001, per_token_sq_s=0.0)


def _step(step: int, tokens: list[tuple[str, int]], tail: int) -> dict[str, Any]:
    """One recorded step as the bench report writes it."""
    messages = [{"index": i, "role": r, "tokens": t} for i, (r, t) in enumerate(tokens)]
    return {
        "step": step,
        "prompt_tokens": sum(t for _, t in tokens) + tail,
        "cached_tokens": 0,
        "messages": messages,
        "cache_break": None,
        "ttft_s": 0.1,  # a key the what-if does not read
    }


def _run(steps: list[dict[str, Any]], agent: int = 0) -> dict[str, Any]:
    return {"agent": agent, "round_index": 0, "steps": steps}


def _history_steps(
    opening: list[tuple[str, int]], turn: list[tuple[str, int]], num_steps: int, tail: int
) -> list[dict[str, Any]]:
    """Steps 0..num_steps-1 of an agent loop: `opening`, then one `turn` appended per step."""
    return [_step(s, opening + turn * s, tail) for s in range(num_steps)]


# A: system 100, user 50, then each step appends assistant 20 + tool 200; 10 tail tokens.
# Prompts: 160, 380, 600, 820.
RUN_A = _run(_history_steps([("system", 100), ("user", 50)], [("assistant", 20), ("tool", 200)],
                            4, tail=10))  # fmt: skip
# B: system 100, user 100, then assistant 50 + tool 50 per step; no tail. Prompts 200..700.
RUN_B = _run(_history_steps([("system", 100), ("user", 100)], [("assistant", 50), ("tool", 50)],
                            6, tail=0), agent=1)  # fmt: skip


def _report(*runs: dict[str, Any], name: str = "prefix") -> dict[str, Any]:
    return {"workload": "agent", "config": {}, "policies": {name: {"agent_runs": list(runs)}}}


def _conv(run: dict[str, Any]) -> Conversation:
    return load_conversations(_report(run)).conversations[0]


def _costs(policy: Any, run: dict[str, Any], block: int = 1) -> list[tuple[int, int, int, bool]]:
    """(sent, cached, computed, breaks prefix) per step."""
    return [
        (o.num_sent_tokens, o.num_cached_tokens, o.num_computed_tokens, o.breaks_prefix)
        for o in replay(policy, _conv(run), LINEAR, block)
    ]


@pytest.mark.parametrize(
    ("policy", "run", "kept", "costs"),
    [
        # none: each step finds the previous step's messages cached and computes what it added.
        (KeepAll(), RUN_A, [(0, 1), (0, 1, 2, 3), (0, 1, 2, 3, 4, 5), tuple(range(8))],
         [(160, 0, 160, False), (380, 150, 230, False), (600, 370, 230, False),
          (820, 590, 230, False)]),
        # drop-tool-results:1: last step's tool result leaves from the middle: break each step.
        (DropToolResults(1), RUN_A, [(0, 1), (0, 1, 2, 3), (0, 1, 2, 4, 5), (0, 1, 2, 4, 6, 7)],
         [(160, 0, 160, False), (380, 150, 230, False), (400, 170, 230, True),
          (420, 190, 230, True)]),
        # drop-tool-results:2: tool 3 leaves at step 3; everything after it is recomputed.
        (DropToolResults(2), RUN_A,
         [(0, 1), (0, 1, 2, 3), (0, 1, 2, 3, 4, 5), (0, 1, 2, 4, 5, 6, 7)],
         [(160, 0, 160, False), (380, 150, 230, False), (600, 370, 230, False),
          (620, 170, 450, True)]),
        # cap-history:400: a sliding window from step 3 on: breaks every step over the cap.
        (CapHistory(400), RUN_B,
         [(0, 1), (0, 1, 2, 3), (0, 1, 2, 3, 4, 5), (0, 1, 4, 5, 6, 7), (0, 1, 6, 7, 8, 9),
          (0, 1, 8, 9, 10, 11)],
         [(200, 0, 200, False), (300, 200, 100, False), (400, 300, 100, False),
          (400, 200, 200, True), (400, 200, 200, True), (400, 200, 200, True)]),
        # cap-history-batched:400: cut to 200 (+ the newest message) at step 3, append at
        # step 4, cut again at step 5: breaks only at the cuts.
        (CapHistoryBatched(400), RUN_B,
         [(0, 1), (0, 1, 2, 3), (0, 1, 2, 3, 4, 5), (0, 1, 7), (0, 1, 7, 8, 9), (0, 1, 11)],
         [(200, 0, 200, False), (300, 200, 100, False), (400, 300, 100, False),
          (250, 200, 50, True), (350, 250, 100, False), (250, 200, 50, True)]),
    ],
)  # fmt: skip
def test_policy_keeps_and_costs_each_step(
    policy: Any,
    run: dict[str, Any],
    kept: list[tuple[int, ...]],
    costs: list[tuple[int, int, int, bool]],
) -> None:
    outcomes = replay(policy, _conv(run), LINEAR, 1)
    assert [o.kept for o in outcomes] == kept
    assert _costs(policy, run) == costs


def test_cap_history_keeps_system_first_user_and_newest_message_even_over_the_cap() -> None:
    # The cap is below the pinned messages alone: they stay, plus the newest message.
    outcomes = replay(CapHistory(100), _conv(RUN_A), LINEAR, 1)
    assert [o.kept for o in outcomes] == [(0, 1), (0, 1, 3), (0, 1, 5), (0, 1, 7)]


def test_cached_tokens_round_down_to_whole_blocks() -> None:
    costs = _costs(KeepAll(), RUN_A, block=64)
    # 150 -> 128, 370 -> 320, 590 -> 576; computed = sent - cached.
    assert costs == [(160, 0, 160, False), (380, 128, 252, False), (600, 320, 280, False),
                     (820, 576, 244, False)]  # fmt: skip


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    step = Step(1, (Message(0, "system", 100), Message(1, "user", 50)), 0, 0)
    assert cached_tokens(step, (0, 1), (0, 1), block_size_tokens=1) == 149
    assert cached_tokens(step, (0, 1), (0, 1), block_size_tokens=16) == 144
    assert cached_tokens(step, (0, 1), None, block_size_tokens=1) == 0


def test_prefill_seconds_are_the_cost_models() -> None:
    model = CostModel(fixed_overhead_s=0.01, per_token_s=1e-3, per_token_sq_s=1e-6)
    outcomes = replay(KeepAll(), _conv(RUN_A), model, 1)
    # Step 1: 230 computed after 150 cached: 0.01 + 0.23 + 1e-6 * 230 * (115 + 150).
    assert outcomes[1].prefill_seconds == pytest.approx(0.30095)
    for o in outcomes:
        expected = model.est_prefill_s(
            num_uncached_tokens=o.num_computed_tokens, num_cached_tokens=o.num_cached_tokens
        )
        assert o.prefill_seconds == expected


def test_evaluate_totals_savings_and_recommendation() -> None:
    policies = [DropToolResults(2), CapHistory(400), CapHistoryBatched(400)]
    result = evaluate(policies, [_conv(RUN_B)], LINEAR, 1)
    rows = {t.policy: t for t in result.totals}
    assert list(rows) == ["none", "drop-tool-results:2", "cap-history:400",
                          "cap-history-batched:400"]  # fmt: skip
    none, batched, cap = rows["none"], rows["cap-history-batched:400"], rows["cap-history:400"]
    assert (none.num_sent_tokens, none.num_computed_tokens) == (2700, 700)
    assert none.num_prefix_breaks == 0
    assert none.prefill_seconds == pytest.approx(0.76)
    assert (batched.num_sent_tokens, batched.num_computed_tokens) == (1750, 600)
    assert batched.saved_prefill_tokens == 100
    assert batched.saved_prefill_tokens_fraction == pytest.approx(1 / 7)
    assert batched.saved_prefill_seconds == pytest.approx(0.1)
    assert batched.num_prefix_breaks == 2 and not batched.stable_prefix
    assert batched.final_prompt_tokens_mean == 250
    assert batched.sent_tokens_fraction == pytest.approx(1750 / 2700)
    # The sliding window sends fewer tokens yet prefills more: it breaks the prefix each step.
    assert cap.num_sent_tokens < none.num_sent_tokens
    assert cap.saved_prefill_tokens == -300 and cap.num_prefix_breaks == 3
    assert rows["drop-tool-results:2"].num_computed_tokens == 1000
    assert result.recommended == "cap-history-batched:400"
    assert [t.policy for t in result.totals if t.stable_prefix] == ["none"]


def test_evaluate_recommends_none_when_no_trimming_helps() -> None:
    # A cap above every prompt trims nothing: same seconds as none, and none wins the tie.
    result = evaluate([CapHistory(10_000)], [_conv(RUN_A)], LINEAR, 1)
    assert result.recommended == "none"
    assert all(t.stable_prefix for t in result.totals)


@pytest.mark.parametrize(
    ("tokens", "cap"), [(4313 / 2, 2100), (525, 520), (350, 350), (7, 7), (0.5, 2)]
)
def test_round_cap_tokens(tokens: float, cap: int) -> None:
    assert round_cap_tokens(tokens) == cap


def test_default_policies_cap_at_half_the_largest_prompt() -> None:
    names = [p.name for p in default_policies([_conv(RUN_A), _conv(RUN_B)])]
    assert names == ["none", "drop-tool-results:2", "cap-history:410", "cap-history-batched:410"]


@pytest.mark.parametrize(
    "text",
    ["none", "drop-tool-results:2", "cap-history:3000", "cap-history-batched:3000"],
)
def test_parse_policy_round_trips(text: str) -> None:
    assert parse_policy(text).name == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("truncate:3", "unknown trimming policy"),
        ("none:3", "unknown trimming policy"),
        ("cap-history", "needs a whole number"),
        ("cap-history:3k", "needs a whole number"),
        ("drop-tool-results:0", "must be >= 1"),
        ("cap-history-batched:1", "must be >= 2"),
    ],
)
def test_parse_policy_rejects_bad_strings(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_policy(text)


def test_runs_without_message_costs_are_skipped_with_a_note() -> None:
    blind = _run([{**_step(0, [("system", 10)], 2), "messages": None}], agent=2)
    loaded = load_conversations(_report(RUN_A, blind))
    assert [c.agent for c in loaded.conversations] == [0]
    assert loaded.notes == ("1 of 2 runs skipped: no per-message token counts (messages is null)",)
    with pytest.raises(ReportError, match="no agent run of 'prefix' can be analysed"):
        load_conversations(_report(blind))


def test_a_run_that_is_not_append_only_is_skipped() -> None:
    steps = [_step(0, [("system", 10), ("user", 5)], 0), _step(1, [("system", 10)], 0)]
    loaded = load_conversations(_report(RUN_A, _run(steps, agent=3)))
    assert [c.agent for c in loaded.conversations] == [0]
    assert "not an append-only history" in loaded.notes[0]


@pytest.mark.parametrize(
    "report",
    [
        {"workload": "mixed", "policies": {"prefix": {"metrics": {}}}},
        {"workload": "agent", "policies": {"prefix": {"agent_runs": None}}},
        {"workload": "agent", "policies": {}},
    ],
)
def test_a_report_without_agent_runs_is_an_error(report: dict[str, Any]) -> None:
    with pytest.raises(ReportError, match=r"no agent runs; record one with `pdserve bench"):
        load_conversations(report)


def test_policy_entry_is_chosen_by_name() -> None:
    report = {"policies": {"a": {"agent_runs": [RUN_A]}, "b": {"agent_runs": [RUN_B]}}}
    assert load_conversations(report).policy_name == "a"
    assert load_conversations(report, "b").conversations[0].agent == 1
    with pytest.raises(ReportError, match=r"no policy entry 'c'.*it has: a, b"):
        load_conversations(report, "c")


# --- the command -------------------------------------------------------------------------

CONFIG_YAML = """\
router:
  routing:
    block_size_tokens: 1
    cost_model: {fixed_overhead_s: 0.01, per_token_s: 0.001, per_token_sq_s: 0}
"""
ENV = {"COLUMNS": "240", "TERMINAL_WIDTH": "240"}


def _files(tmp_path: pathlib.Path, report: dict[str, Any]) -> tuple[str, str]:
    (tmp_path / "report.json").write_text(json.dumps(report))
    (tmp_path / "cfg.yaml").write_text(CONFIG_YAML)
    return str(tmp_path / "report.json"), str(tmp_path / "cfg.yaml")


def _table_rows(output: str) -> dict[str, list[str]]:
    """Policy -> its other cells in the printed table (a cell's lines joined by spaces)."""
    rows: dict[str, list[list[str]]] = {}
    current: list[list[str]] = []
    for line in output.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[0]:
            current = rows.setdefault(cells[0], [[] for _ in cells[1:]])
        for parts, cell in zip(current, cells[1:], strict=True):
            if cell:
                parts.append(cell)
    return {name: [" ".join(parts) for parts in cells] for name, cells in rows.items()}


def test_cli_prints_the_table_and_verdict_and_writes_json(tmp_path: pathlib.Path) -> None:
    blind = _run([{**_step(0, [("system", 10)], 2), "messages": None}], agent=2)
    report, config = _files(tmp_path, _report(RUN_B, blind))
    trims = ["--trim", "drop-tool-results:2", "--trim", "cap-history:400",
             "--trim", "cap-history-batched:400"]  # fmt: skip
    args = ["context", "whatif", report, "--config", config, *trims, "--json", f"{tmp_path}/o.json"]
    result = CliRunner().invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    rows = _table_rows(result.output)
    assert list(rows) == ["none", "drop-tool-results:2", "cap-history:400",
                          "cap-history-batched:400 *"]  # fmt: skip
    assert rows["none"] == ["2,700", "700", "0.760", "0.000 s (0%) 0 tok (0%)", "0/6", "yes", "700"]
    assert rows["cap-history-batched:400 *"] == [
        "1,750", "600", "0.660", "0.100 s (13%) 100 tok (14%)", "2/6", "no", "250"
    ]  # fmt: skip
    assert rows["cap-history:400"][1] == "1,000" and rows["cap-history:400"][4] == "3/6"
    assert "Recommended: cap-history-batched:400" in result.output
    assert "Keep the prefix stable (0 prefix breaks" in result.output
    assert "): none." in result.output
    assert "answer quality is not estimated" in result.output
    assert "1 of 2 runs skipped" in result.output
    written = json.loads((tmp_path / "o.json").read_text())
    assert written["recommended"] == "cap-history-batched:400"
    assert written["stable_policies"] == ["none"]
    assert [p["num_computed_tokens"] for p in written["policies"]] == [700, 1000, 1000, 600]


def test_cli_default_trims(tmp_path: pathlib.Path) -> None:
    report, config = _files(tmp_path, _report(RUN_B))
    result = CliRunner().invoke(app, ["context", "whatif", report, "-c", config], env=ENV)
    assert result.exit_code == 0, result.output
    for name in ("drop-tool-results:2", "cap-history:350", "cap-history-batched:350"):
        assert name in result.output


def test_cli_report_without_agent_runs_exits_2(tmp_path: pathlib.Path) -> None:
    report, config = _files(tmp_path, {"workload": "mixed", "policies": {"prefix": {}}})
    result = CliRunner().invoke(app, ["context", "whatif", report, "-c", config], env=ENV)
    assert result.exit_code == 2
    assert "this report has no agent runs; record one with `pdserve bench --workload agent" in (
        " ".join(result.output.split())
    )


def test_cli_bad_trim_exits_2(tmp_path: pathlib.Path) -> None:
    report, config = _files(tmp_path, _report(RUN_B))
    args = ["context", "whatif", report, "-c", config, "--trim", "cap-history:lots"]
    result = CliRunner().invoke(app, args, env=ENV)
    assert result.exit_code == 2
    assert "needs a whole number" in result.output


def test_a_note_says_when_no_message_is_a_tool_result() -> None:
    steps = _history_steps([("system", 10), ("user", 5)], [("assistant", 5), ("user", 20)], 3, 0)
    loaded = load_conversations(_report(_run(steps)))
    assert loaded.notes == (
        "no message has role 'tool' (tool results sent as 'user'?): drop-tool-results drops "
        "nothing",
    )
    assert load_conversations(_report(RUN_A)).notes == ()


def test_null_counts_and_missing_steps() -> None:
    # Only successful steps are recorded: step 2 is missing, so step 3 appends four messages
    # to step 1's history. A step without prompt_tokens makes its run unusable; one without
    # cached_tokens only leaves the recorded comparison.
    steps = [RUN_A["steps"][0], RUN_A["steps"][1], RUN_A["steps"][3]]
    steps = [{**steps[0], "cached_tokens": None}, steps[1], {**steps[2], "cached_tokens": 512}]
    unsized = _run([{**RUN_A["steps"][0], "prompt_tokens": None}], agent=4)
    loaded = load_conversations(_report(_run(steps), unsized))
    assert loaded.notes == ("1 of 2 runs skipped: no prompt token count (prompt_tokens is null)",)
    conv = loaded.conversations[0]
    assert _costs_of(KeepAll(), conv) == [(160, 0, 160), (380, 150, 230), (820, 370, 450)]
    # Ages count from the first recorded prompt holding a message: tool 3 (step 1) is 2 steps
    # old at step 3 and goes; tool 5 first shows at step 3 and stays.
    assert replay(DropToolResults(2), conv, LINEAR, 1)[-1].kept == (0, 1, 2, 4, 5, 6, 7)
    result = evaluate([], [conv], LINEAR, 1)
    assert (result.num_recorded_cached_tokens, result.num_steps_without_recorded_cache) == (512, 1)
    assert recorded_note(result) == (
        "As recorded, the engine found 512 prompt tokens in its prefix cache over these runs "
        "(1 step that did not report it left out); the model counts 520 for none."
    )


def _costs_of(policy: Any, conv: Conversation) -> list[tuple[int, int, int]]:
    return [
        (o.num_sent_tokens, o.num_cached_tokens, o.num_computed_tokens)
        for o in replay(policy, conv, LINEAR, 1)
    ]
