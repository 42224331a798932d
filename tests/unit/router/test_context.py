"""Prompt layout, cost by part and cache-break detection (router/context/), on the demo
model's real tokenizer and chat template."""

from __future__ import annotations

import itertools

import pytest

from pdserve.demo_tokenizer import save_tokenizer, train_tokenizer
from pdserve.router.context.breaks import (
    ENTRY_OVERHEAD_BYTES,
    ConversationTracker,
    common_prefix_tokens,
    conversation_key,
)
from pdserve.router.context.cost import prompt_cost
from pdserve.router.context.layout import (
    LayoutMismatch,
    MessageSpan,
    PromptLayout,
    layout_from_render,
    skeleton_marker,
)
from pdserve.router.openai_models import ChatMessage
from pdserve.router.prompts import PromptRenderer

SYSTEM = "You are a careful agent. Use the tools; answer briefly."
TASK = "Task: count the apples in the report and say how many are red."


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> PromptRenderer:
    out = tmp_path_factory.mktemp("tok")
    save_tokenizer(train_tokenizer(), out)
    return PromptRenderer(str(out))


def msgs(*pairs: tuple[str, str]) -> list[ChatMessage]:
    return [ChatMessage(role=r, content=c) for r, c in pairs]  # type: ignore[arg-type]


def agent_steps(system: str = SYSTEM) -> list[list[ChatMessage]]:
    """Three steps of an agent loop: each appends the reply and a tool result."""
    base = [("system", system), ("user", TASK)]
    two = [*base, ("assistant", "Calling count_apples."), ("tool", "apples: 12, red: 5")]
    three = [*two, ("assistant", "Calling check_colour."), ("tool", "colour check: ok")]
    return [msgs(*base), msgs(*two), msgs(*three)]


def test_layout_covers_every_token_and_matches_the_plain_render(renderer: PromptRenderer) -> None:
    messages = agent_steps()[2]
    plain = renderer.render_chat(messages, True)
    rendered = renderer.render_chat(messages, True, layout=True)
    assert rendered.token_ids == plain.token_ids and plain.layout is None
    layout = rendered.layout
    assert layout is not None and layout.num_tokens == len(plain.token_ids)
    spans = layout.messages
    assert [s.role for s in spans] == [m.role for m in messages]
    assert spans[0].start == 0  # the bos token belongs to the first message's segment
    for prev, nxt in itertools.pairwise(spans):
        assert prev.end == nxt.start  # contiguous
    for s in spans:
        assert s.start < s.content_start < s.end  # a role header, then content
    # The content tokens decode back to the message's own text.
    tok = renderer._tok
    for s, m in zip(spans, messages, strict=True):
        text = tok.decode(rendered.token_ids[s.content_start : s.end])
        assert text.strip() == m.text()
    # After the last content: end of turn and the generation prompt.
    tail = tok.decode(rendered.token_ids[layout.content_end :])
    assert tail == "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


def test_layout_follows_trimmed_content_and_refuses_rewritten_content() -> None:
    roles, contents = ["user"], ["  hello  "]
    skeleton = f"<s>[{skeleton_marker(0)}]"
    text = "<s>[hello]"
    offsets = [(0, 3), (3, 4), (4, 9), (9, 10)]
    layout = layout_from_render(text, offsets, skeleton, roles, contents)
    assert layout.messages == (MessageSpan(0, "user", 0, 2, 3),)
    with pytest.raises(LayoutMismatch):
        layout_from_render("<s>[HELLO]", offsets, skeleton, roles, contents)
    with pytest.raises(LayoutMismatch):  # a template that drops a message's content
        layout_from_render(text, offsets, "<s>[]", roles, contents)


@pytest.mark.parametrize("num_cached", [0, 1, 7, 30, 10_000])
def test_cost_parts_add_up_to_prompt_and_cached_tokens(
    renderer: PromptRenderer, num_cached: int
) -> None:
    rendered = renderer.render_chat(agent_steps()[2], True, layout=True)
    n = len(rendered.token_ids)
    cost = prompt_cost(n, num_cached, rendered.layout)
    assert sum(t.total for t in cost.parts.values()) == n
    assert sum(t.cached for t in cost.parts.values()) == min(num_cached, n)
    layout = rendered.layout
    assert layout is not None
    assert sum(m.tokens.total for m in cost.messages) + n - layout.content_end == n
    assert set(cost.parts) == {"system", "user", "assistant", "tool", "template"}
    # The cached tokens are the prompt's first ones: the system prompt is cached first.
    if layout.messages[0].content_start < num_cached < layout.messages[0].end:
        assert cost.parts["user"].cached == 0 and cost.parts["system"].cached > 0


def test_cost_without_layout_is_one_prompt_part() -> None:
    cost = prompt_cost(100, 40, None)
    assert {p: (t.cached, t.computed) for p, t in cost.parts.items()} == {"prompt": (40, 60)}
    wrong = PromptLayout(5, (MessageSpan(0, "user", 0, 1, 5),))  # not this prompt's layout
    assert set(prompt_cost(100, 40, wrong).parts) == {"prompt"}


def test_cost_splits_by_message_segments() -> None:
    layout = PromptLayout(
        12, (MessageSpan(0, "system", 0, 2, 6), MessageSpan(1, "developer", 6, 7, 10))
    )
    cost = prompt_cost(12, 7, layout)
    parts = {p: (t.cached, t.computed) for p, t in cost.parts.items()}
    # template: [0,2) cached, [6,7) cached, tail [10,12) computed; system [2,6) cached;
    # developer counts as system: [7,10) has nothing cached.
    assert parts == {"system": (4, 3), "template": (3, 2)}
    assert [(m.index, m.tokens.cached, m.tokens.computed) for m in cost.messages] == [
        (0, 6, 0),
        (1, 1, 3),
    ]
    assert cost.usage_json()["messages"][1] == {
        "index": 1, "role": "developer", "cached": 1, "computed": 3
    }  # fmt: skip


def test_stable_agent_loop_has_no_break(renderer: PromptRenderer) -> None:
    tracker = ConversationTracker(1 << 20)
    key = conversation_key("user", "agent-1")
    for messages in agent_steps():
        r = renderer.render_chat(messages, True, layout=True)
        assert tracker.observe(key, r.token_ids, r.layout) is None


def test_changing_system_prompt_breaks_at_message_0_every_step(renderer: PromptRenderer) -> None:
    tracker = ConversationTracker(1 << 20)
    key = conversation_key("header", "agent-2")
    previous = 0
    for step, messages in enumerate(agent_steps()):
        stamped = [ChatMessage(role="system", content=f"Time: 12:00:0{step}. {SYSTEM}")]
        r = renderer.render_chat([*stamped, *messages[1:]], True, layout=True)
        found = tracker.observe(key, r.token_ids, r.layout)
        if step == 0:
            assert found is None  # nothing to compare with yet
        else:
            assert found is not None
            assert (found.message_index, found.role, found.part) == (0, "system", "system")
            layout = r.layout
            assert layout is not None
            assert layout.messages[0].content_start <= found.token_index < layout.messages[0].end
            assert found.lost_tokens == previous - found.token_index  # 1-token blocks
        previous = len(r.token_ids)


def test_rewritten_history_breaks_at_the_rewritten_message(renderer: PromptRenderer) -> None:
    tracker = ConversationTracker(1 << 20)
    key = conversation_key("user", "agent-3")
    steps = agent_steps()
    r2 = renderer.render_chat(steps[1], True, layout=True)
    tracker.observe(key, r2.token_ids, r2.layout)
    rewritten = list(steps[2])
    rewritten[3] = ChatMessage(role="tool", content="(tool result trimmed)")
    r3 = renderer.render_chat(rewritten, True, layout=True)
    found = tracker.observe(key, r3.token_ids, r3.layout)
    assert found is not None and (found.message_index, found.role) == (3, "tool")


def test_a_retry_or_a_shorter_repeat_is_not_a_break() -> None:
    tracker = ConversationTracker(1 << 20)
    key = conversation_key("user", "u")
    tracker.observe(key, list(range(100)), None)
    assert tracker.observe(key, list(range(100)), None) is None  # the same prompt again
    assert tracker.observe(key, list(range(60)), None) is None  # a shorter repeat
    found = tracker.observe(key, [*range(30), 999], None)
    assert found is not None and found.token_index == 30 and found.part == "prompt"
    assert found.lost_tokens == 1  # min(60, 31) - 30


def test_lost_tokens_count_whole_kv_blocks() -> None:
    tracker = ConversationTracker(1 << 20, block_size_tokens=16)
    key = conversation_key("user", "blocks")
    tracker.observe(key, list(range(100)), None)  # 6 whole blocks: 96 tokens
    found = tracker.observe(key, [*range(40), -1, *range(41, 120)], None)
    assert found is not None and found.token_index == 40
    assert found.lost_tokens == 96 - 32  # blocks 2..5: the break's block on
    found = tracker.observe(key, [*range(40), -1, *range(41, 97), -2], None)
    assert found is not None and found.token_index == 97 and found.lost_tokens == 0  # last block


def test_common_prefix_is_exact() -> None:
    from array import array

    a = array("i", range(1000)).tobytes()
    for cut in (0, 1, 499, 999):
        b = array("i", [*range(cut), -1, *range(cut + 1, 1000)]).tobytes()
        assert common_prefix_tokens(a, b) == cut
    assert common_prefix_tokens(a, a) == 1000
    assert common_prefix_tokens(a, a[:40]) == 10


def test_state_stays_within_its_bound_over_thousands_of_conversations() -> None:
    max_bytes = 1 << 20
    tracker = ConversationTracker(max_bytes)
    prompt = list(range(500))  # 2,000 bytes + overhead per conversation
    for i in range(5000):
        tracker.observe(conversation_key("user", f"c{i}"), prompt, None)
        assert tracker.stored_bytes <= max_bytes
    per_entry = 4 * len(prompt) + ENTRY_OVERHEAD_BYTES
    assert tracker.num_conversations == max_bytes // per_entry
    # The most recent conversations are remembered, the oldest forgotten.
    recent = conversation_key("user", "c4999")
    assert tracker.observe(recent, [7, *prompt[1:]], None) is not None
    assert tracker.observe(conversation_key("user", "c0"), [7], None) is None
    # A prompt bigger than the whole store is compared but not kept.
    huge = list(range(max_bytes // 4))
    tracker.observe(conversation_key("user", "huge"), huge, None)
    assert tracker.stored_bytes <= max_bytes


def test_keys_are_fixed_size_and_scoped_by_kind() -> None:
    assert len(conversation_key("user", "x" * 10_000)) == 16
    assert conversation_key("user", "a") != conversation_key("header", "a")
