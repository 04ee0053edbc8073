"""Oversized inputs (issue 18): tool outputs are capped, a prompt that does not fit raises PromptTooLong before
anything is allocated, and history trimming drops the oldest turns without separating a call from its
response. Scripted backends for the planner's rules; a tiny random-weight checkpoint (512 positions) for the
embedded path end to end."""

import json
import pickle

import pydantic
import pytest
from typer.testing import CliRunner

from agentkit import Agent, Conversation, MaxStepsExceeded, PromptTooLong, ToolDefinitionError, tool
from agentkit.backends.base import PromptTooLong as BackendPromptTooLong
from agentkit.backends.scripted import ScriptedBackend, answer, call
from agentkit.bundle import load_bundle
from agentkit.errors import BundleError
from agentkit.events import PromptTrimmed
from agentkit.history import droppable_groups
from agentkit.messages import ToolCall
from agentkit.tool_output import cap_output, cap_output_tokens
from model.turn.limits import PromptTooLong as ModelPromptTooLong

BIG = "lorem ipsum dolor sit amet " * 80_000  # 2,160,000 bytes, the issue's "2 MB result"
MARK = "[agentkit: cut "


def nbytes(s: str) -> int:
    return len(s.encode("utf-8"))


@tool
def fetch(url: str) -> str:
    """Fetch a page.

    Args:
        url: The URL.
    """
    return BIG


# ------------------------------------------------------------------------------------------- output caps


def test_cap_output_keeps_whole_characters_and_says_how_much_was_cut():
    text = "é" * 2000  # 4,000 bytes
    out = cap_output(text, 100)
    assert nbytes(out) <= 100
    head, marker = out.split("\n")
    assert set(head) == {"é"}  # no split character
    cut = 4000 - nbytes(head)
    assert marker == f"[agentkit: cut {cut:,} of 4,000 bytes of this tool output (limit 100 bytes)]"
    assert cap_output(text, 4000) is text and cap_output(text, None) is text
    assert cap_output("a" * 50, 10).startswith("\n[agentkit: cut 50 of 50 bytes")  # marker alone


def test_python_tool_output_is_capped_by_default():
    backend = ScriptedBackend([call("fetch", url="u"), answer("done")])
    result = Agent(backend, [fetch]).run("Summarise u")
    content = result.tool_calls[0].content
    # a backend that does not state its context gets the 32 KiB default budget per model turn
    assert nbytes(content) <= 32_768 and content.startswith("lorem ipsum")
    kept = nbytes(content.split("\n[agentkit")[0])
    assert content.endswith(
        f"cut {len(BIG) - kept:,} of 2,160,000 bytes of this tool output (limit 32,768 bytes)]"
    )
    assert result.tool_calls[0].result is BIG  # the Python value is kept whole
    assert backend.requests[1].messages[-1]["content"] == content  # what the model saw


def test_agent_budget_is_shared_by_a_turns_calls_and_a_tool_limit_wins_when_smaller():
    @tool(max_output_bytes=300)
    def small(i: int) -> str:
        """Small cap."""
        return "y" * 10_000

    calls = [call("fetch", url=str(i)) for i in range(25)] + [call("small", i=0)]
    backend = ScriptedBackend([calls, answer("ok")])
    result = Agent(backend, [fetch, small], max_tool_output_bytes=26_000).run("go")
    sizes = [nbytes(r.content) for r in result.tool_calls]
    assert all(MARK in r.content for r in result.tool_calls)
    assert max(sizes[:25]) <= 1_000 and min(sizes[:25]) >= 990  # 26,000 / 26 calls
    assert sizes[25] <= 300 and "(limit 300 bytes)" in result.tool_calls[25].content
    assert sum(sizes) <= 26_000  # the 5 MB turn of the issue now sends at most the budget


def test_exception_text_is_capped_and_limits_are_checked():
    @tool
    def boom() -> str:
        """Fails loudly."""
        raise ValueError("x" * 100_000)

    backend = ScriptedBackend([call("boom"), answer("ok")])
    rec = Agent(backend, [boom], max_tool_output_bytes=500).run("go").tool_calls[0]
    assert rec.error_kind == "exception" and nbytes(rec.error) <= 500 and MARK in rec.error
    with pytest.raises(ToolDefinitionError, match="max_output_bytes must be an integer >= 1"):
        tool(name="t", max_output_bytes=0)(lambda: "")
    with pytest.raises(ValueError, match="max_tool_output_bytes must be an integer >= 1"):
        Agent(ScriptedBackend([]), max_tool_output_bytes=0)
    assert Agent(ScriptedBackend([]), max_tool_output_bytes=None).tool_output_budget() is None


def test_error_responses_of_planning_are_capped_and_share_the_budget():
    # invalid arguments, an unknown tool and undecodable arguments echo what the model wrote: 50 KB of it came
    # back whole (twice for invalid arguments), past the tool's max_output_bytes and the agent's budget
    @tool(max_output_bytes=200)
    def short(x: str) -> str:
        """Short answers."""
        return x[:5]

    undecodable = ToolCall(id="", name="short", arguments={}, error="not JSON", raw_arguments="z" * 50_000)
    steps = [call("short", x=1, y="y" * 50_000), call("nosuch", q="w" * 50_000), [undecodable]]
    backend = ScriptedBackend([*steps, [call("short", x="abcdefgh"), call("nosuch", q="w" * 50_000)], "done"])
    # (the echoed arguments are cut to a one-line note first; a limit too small for the hints keeps the error)
    result = Agent(backend, [short], max_tool_output_bytes=250, loop_guard=None).run("go")
    sizes = [nbytes(r.content) for r in result.tool_calls]
    kinds = [r.error_kind for r in result.tool_calls]
    assert kinds == ["invalid_arguments", "unknown_tool", "decode", None, "unknown_tool"]
    assert sizes[0] <= 200 and sizes[2] <= 200  # the tool's own limit
    assert sizes[1] <= 250  # the agent's budget for a step of one call
    assert sizes[3] == 5 and sizes[4] <= 125  # a step of two calls: half the budget each
    shown = [json.loads(result.tool_calls[i].content) for i in (0, 1, 2, 4)]  # each still one JSON object
    assert shown[0] == {
        "error": "invalid arguments: x: Input should be a valid string (got 1); y: unknown argument",
        "tool": "short",
    }
    assert shown[1]["arguments"] == "<50,009 bytes of arguments, not repeated>"
    assert shown[1]["valid_tools"] == ["short"] and shown[1]["hint"] == "call one of valid_tools"
    assert shown[2] == {"error": "not JSON", "tool": "short"}
    assert shown[3] == {"error": "unknown tool 'nosuch'", "tool": "nosuch"}


def test_error_responses_fit_the_cap_with_their_json_wrapper():
    # the message was capped and then wrapped in JSON: escaping and the parameters schema went past the cap
    @tool
    def quotes() -> str:
        """Fails with a message of quotes."""
        raise ValueError('"' * 100_000)

    @tool(max_output_bytes=400)
    def ctrl(a: int) -> str:
        """Fails with control characters (6 bytes each in JSON)."""
        raise ValueError("\x01" * 10_000)

    fields = {f"field_{k}": (str, ...) for k in range(40)}  # a parameters schema of about 2 KB
    wide = tool(name="wide", args_model=pydantic.create_model("Wide", **fields), max_output_bytes=1_500)(
        lambda **kw: ""
    )
    backend = ScriptedBackend([[call("quotes"), call("ctrl", a=1)], call("wide", field_0=1), "ok"])
    result = Agent(backend, [quotes, ctrl, wide], max_tool_output_bytes=65_536).run("go")
    recs = result.tool_calls
    assert [r.error_kind for r in recs] == ["exception", "exception", "invalid_arguments"]
    assert [nbytes(r.content) <= cap for r, cap in zip(recs, (32_768, 400, 1_500), strict=True)] == [True] * 3
    first, second, third = (json.loads(r.content) for r in recs)
    assert first["error"].startswith('ValueError: """') and first["tool"] == "quotes"
    assert "bytes of this error message]" in first["error"] and first["arguments"] == {}
    assert nbytes(recs[0].content) > 32_000  # the longest head that fits, not a tiny one
    assert second["error"].startswith("ValueError: \x01") and second["arguments"] == {"a": 1}
    assert (
        third["parameters"].startswith("<the parameters schema (")
        and "is in the tool's" in third["parameters"]
    )
    assert third["error"].startswith("invalid arguments: field_0: Input should be a valid string")


def test_bundle_sets_tool_and_agent_limits(tmp_path):
    mod = tmp_path / "limits_tools_mod.py"
    mod.write_text("def page(url: str) -> str:\n    '''A page.'''\n    return 'z' * 5000\n")
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: b\nmodel: {backend: scripted, name: s.json}\n"
        "agent: {max_tool_output_bytes: 4000, trim_history: false}\n"
        "tools:\n  - {name: page, python: 'limits_tools_mod:page', max_output_bytes: 120}\n"
    )
    (tmp_path / "s.json").write_text(
        json.dumps([{"tool_calls": [{"name": "page", "arguments": {"url": "u"}}]}, "ok"])
    )
    agent = load_bundle(p).make_agent()
    assert (agent.max_tool_output_bytes, agent.trim_history, agent.tools["page"].max_output_bytes) == (
        4000,
        False,
        120,
    )
    content = agent.run("q").tool_calls[0].content
    assert nbytes(content) <= 120 and content.endswith("(limit 120 bytes)]")
    p.write_text(p.read_text().replace("4000", "0").replace("max_output_bytes: 120", "max_output_bytes: -1"))
    with pytest.raises(BundleError) as ei:
        load_bundle(p)
    fields = {i.field: i.message for i in ei.value.issues}
    assert "must be an integer >= 1 (bytes), 'auto' or null, got 0" in fields["agent.max_tool_output_bytes"]
    assert "tools[0].max_output_bytes" in fields


# --------------------------------------------------------------------------------------- history trimming


def test_droppable_groups_keep_calls_with_their_responses():
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "now"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c0"}, {"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c0", "content": "r0"},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
    ]
    # oldest first; never the system prompt (0), the question (5) or the latest call group (9-10)
    assert droppable_groups(msgs) == [(1, 3), (3, 5), (6, 9)]
    assert droppable_groups(msgs[:6]) == [(1, 3), (3, 5)]
    assert droppable_groups([{"role": "user", "content": "q"}]) == []


def _chars(messages):
    return sum(len(json.dumps(m)) for m in messages)


def _check_pairing(messages):
    """Every call id of an assistant message is answered in the same prompt, and every response has its call."""
    asked = [tc["id"] for m in messages if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered)
    # each response directly follows its call message (or a sibling response)
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            j = i
            while messages[j]["role"] == "tool":
                j -= 1
            assert m["tool_call_id"] in [tc["id"] for tc in messages[j]["tool_calls"]]


def test_history_trimming_drops_oldest_turns_and_never_splits_a_call_from_its_response():
    limit_chars = 1100
    seen = []

    @tool
    def lookup(k: int) -> str:
        """Look up k."""
        return f"value-{k}-" + "v" * 200

    script = iter(
        [
            [call("lookup", k=1), call("lookup", k=2)],
            [call("lookup", k=3)],
            [call("lookup", k=4)],
            answer("the answer"),
        ]
    )

    def model(messages, tools, tool_choice):
        if _chars(messages) > limit_chars:  # the backend's check: a typed error, before any allocation
            raise BackendPromptTooLong(_chars(messages) // 4, limit_chars // 4, 1000, 100)
        seen.append([dict(m) for m in messages])
        return next(script)

    history = Conversation()
    for i in range(6):
        history = history.with_turn(f"old question {i} " + "q" * 60, f"old answer {i} " + "a" * 60)
    events = []
    result = Agent(ScriptedBackend(model), [lookup], system_prompt="sys").run(
        "the question", history=history, on_event=events.append
    )
    assert result.answer == "the answer"
    assert len(seen) == 4  # one accepted prompt per step
    for prompt in seen:
        assert _chars(prompt) <= limit_chars
        assert prompt[0] == {"role": "system", "content": "sys"}
        assert {"role": "user", "content": "the question"} in prompt
        _check_pairing(prompt)
        # what is left of the kept history is its most recent turns, in order
        old = [m["content"] for m in prompt if m["content"] and m["content"].startswith("old ")]
        n = len(old) // 2
        assert old == [
            x
            for i in range(6 - n, 6)
            for x in (f"old question {i} " + "q" * 60, f"old answer {i} " + "a" * 60)
        ]
    assert len(seen[0]) < 1 + 12 + 1  # some history dropped at step 0
    last = seen[-1]
    assert "value-4-" in last[-1]["content"]  # the latest call and its response are always there
    assert not any("value-1-" in (m["content"] or "") for m in last)  # the oldest call group went first
    trims = [e for e in events if isinstance(e, PromptTrimmed)]
    assert trims and all(e.limit == limit_chars // 4 for e in trims)
    assert len(result.messages) == 1 + 12 + 1 + 3 + 2 + 2 + 1  # the transcript keeps everything


def test_trimming_off_or_nothing_left_raises_prompt_too_long_with_tokens_and_limit():
    def model(messages, tools, tool_choice):
        raise BackendPromptTooLong(5000, 1792, 2048, 256)

    history = Conversation().with_turn("q", "a")
    with pytest.raises(PromptTooLong) as ei:
        Agent(ScriptedBackend(model), trim_history=False).run("hi", history=history)
    e = ei.value
    assert (e.prompt_tokens, e.limit, e.result.stop_reason, e.result.steps) == (
        5000,
        1792,
        "prompt_too_long",
        [],
    )
    assert e.reason.startswith("step 0: the prompt is 5,000 tokens but this model takes at most 1,792")
    assert "history trimming is off" in e.reason and "\n" not in e.reason
    with pytest.raises(PromptTooLong) as ei:
        Agent(ScriptedBackend(model)).run("hi", history=history)
    assert (
        ei.value.dropped_messages == 2
        and "dropped 2 older message(s); nothing left to drop" in ei.value.reason
    )


def test_a_generation_budget_that_fills_the_context_names_max_new_tokens_and_trims_nothing():
    seen = []

    def model(messages, tools, tool_choice):
        seen.append(messages)
        raise BackendPromptTooLong(13, 2048 - 100032, 2048, 100032)

    history = Conversation().with_turn("q", "a")
    with pytest.raises(PromptTooLong) as ei:
        Agent(ScriptedBackend(model)).run("hi", history=history)
    reason = ei.value.reason
    assert reason.startswith("step 0: the generation budget of 100,032 tokens (max_new_tokens")
    assert "lower max_new_tokens" in reason and "shorten the question" not in reason
    assert ei.value.dropped_messages == 0 and len(seen) == 1  # asked once: no history dropped for nothing


# ------------------------------------------------------------------------------- embedded, end to end

torch = pytest.importorskip("torch")

POSITIONS = 512
BUDGET = 48  # max_new_tokens: three canvases of 16
LIMIT = POSITIONS - BUDGET


@pytest.fixture(scope="module")
def small_ckpt(tiny_checkpoint):
    path = tiny_checkpoint("limits", 4)
    cfg = json.loads((path / "config.json").read_text())
    cfg["text_config"]["max_position_embeddings"] = POSITIONS
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def chat_model(small_ckpt):
    from model.turn.chat import ChatModel

    return ChatModel.load(str(small_ckpt))


@pytest.fixture
def prompt_lengths(monkeypatch):
    """Prompt lengths that reached the runtime's generate (where the KV cache and masks are allocated)."""
    import model.turn.chat

    lengths = []
    real = model.turn.chat.generate

    def spy(m, input_ids, *a, **k):
        lengths.append(int(input_ids.shape[1]))
        return real(m, input_ids, *a, **k)

    monkeypatch.setattr(model.turn.chat, "generate", spy)
    return lengths


def _agent(chat_model, **kw):
    from agentkit.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(chat_model=chat_model, seed=0, max_new_tokens=BUDGET)
    return Agent(backend, [fetch], tool_choice={"name": "fetch"}, max_steps=2, loop_guard=None, **kw)


def test_embedded_limit_is_positions_minus_generation_budget(chat_model):
    from agentkit.backends.embedded import EmbeddedBackend

    assert chat_model.max_prompt_tokens(BUDGET) == LIMIT
    assert chat_model.max_prompt_tokens(49) == POSITIONS - 64  # rounded up to whole canvases
    assert EmbeddedBackend(chat_model=chat_model, max_new_tokens=BUDGET).max_prompt_tokens == LIMIT
    agent = _agent(chat_model)
    assert agent.tool_output_token_budget() == LIMIT // 2  # the backend counts tokens: half the prompt
    assert agent.tool_output_budget() == LIMIT // 2 * 16  # a byte pre-cut that never binds first


def test_embedded_2mb_tool_result_is_capped_to_fit_the_context(chat_model, prompt_lengths):
    from agentkit.backends.embedded import EmbeddedBackend

    try:
        result = _agent(chat_model).run("Summarise https://example.com")
    except MaxStepsExceeded as exc:  # random weights may keep calling
        result = exc.result
    recs = result.steps[0].tool_calls
    count = EmbeddedBackend(chat_model=chat_model).count_tokens
    assert recs and all(count(r.content) <= LIMIT // 2 // len(recs) for r in recs)
    assert all(
        f"of 2,160,000 bytes of this tool output (limit {LIMIT // 2 // len(recs)} tokens)]" in r.content
        for r in recs
    )
    assert len(prompt_lengths) == 2 and max(prompt_lengths) <= LIMIT


def test_embedded_uncapped_result_raises_before_allocation(chat_model, prompt_lengths):
    @tool
    def page(url: str) -> str:
        """A page."""
        return "lorem ipsum " * 20_000  # 240 KB

    agent = _agent(chat_model, max_tool_output_bytes=None)
    agent = Agent(
        agent.backend, [page], tool_choice={"name": "page"}, max_steps=2, max_tool_output_bytes=None
    )
    with pytest.raises(PromptTooLong) as ei:
        agent.run("Summarise https://example.com")
    e = ei.value
    assert e.limit == LIMIT and e.prompt_tokens > 10_000
    assert f"the prompt is {e.prompt_tokens:,} tokens but this model takes at most {LIMIT}" in str(e)
    assert f"{POSITIONS} positions minus a generation budget of {BUDGET} tokens" in str(e)
    # step 1's prompt never reached generate
    assert prompt_lengths == [prompt_lengths[0]] and prompt_lengths[0] <= LIMIT
    assert e.result.steps[0].tool_calls[0].name == "page"  # the partial transcript


def test_embedded_long_history_is_trimmed_to_fit(chat_model, prompt_lengths):
    from agentkit.backends.embedded import EmbeddedBackend

    history = Conversation()
    for i in range(20):
        history = history.with_turn(
            f"question {i} about the weather in Paris", f"answer {i}: it is sunny today"
        )
    events = []
    agent = Agent(
        EmbeddedBackend(chat_model=chat_model, seed=0, max_new_tokens=BUDGET), system_prompt="Be brief."
    )
    result = agent.run("And tomorrow?", history=history, on_event=events.append)
    assert result.answer is not None and result.conversation.turns == 21
    assert prompt_lengths and max(prompt_lengths) <= LIMIT
    trimmed = [e for e in events if isinstance(e, PromptTrimmed)]
    assert trimmed and trimmed[0].prompt_tokens > LIMIT and trimmed[-1].dropped_messages % 2 == 0


def test_chat_model_raises_prompt_too_long_before_generating(chat_model, prompt_lengths):
    with pytest.raises(ModelPromptTooLong) as ei:
        chat_model.chat([{"role": "user", "content": "word " * 2000}], max_new_tokens=BUDGET)
    assert ei.value.limit == LIMIT and ei.value.prompt_tokens > LIMIT and prompt_lengths == []


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_prompt_too_long_is_one_line_exit_2(small_ckpt, tmp_path):
    from agentkit.cli import app

    b = tmp_path / "b.yaml"
    b.write_text(
        f"agentkit_bundle: 1\nname: b\nmodel: {{name: '{small_ckpt}', max_new_tokens: {BUDGET}}}\ntools: []\n"
    )
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(b), "word " * 2000])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("PromptTooLong: step 0: the prompt is ")
    assert f"tokens but this model takes at most {LIMIT} ({POSITIONS} positions" in lines[0]
    res = runner.invoke(
        app, ["generate", "word " * 2000, "--model", str(small_ckpt), "--max-new-tokens", str(BUDGET)]
    )
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0 and "error: PromptTooLong: the prompt is" in res.stderr


def test_token_cap_keeps_the_longest_head_that_fits():
    def count(text):  # a stand-in tokenizer: one token per 3 characters, rounded up
        return -(-len(text) // 3)

    text = "x" * 3000
    out = cap_output_tokens(text, 200, count)
    assert count(out) <= 200 and out.startswith("x" * 400)
    assert out.endswith("bytes of this tool output (limit 200 tokens)]")
    assert count(cap_output_tokens(text, 199, count)) <= 199
    assert cap_output_tokens("short", 10, count) == "short"


def test_the_backends_prompt_too_long_is_the_models_one_class():
    # one definition: what the embedded model raises is what the planner catches (no conversion in between)
    assert BackendPromptTooLong is ModelPromptTooLong and issubclass(BackendPromptTooLong, ValueError)
    assert not issubclass(PromptTooLong, ValueError)  # the run's error is an AgentRunError, not a ValueError
    short = BackendPromptTooLong(5000, 1792)  # a remote server may give only the two counts
    assert str(short) == "the prompt is 5,000 tokens but this model takes at most 1,792"
    assert (short.max_positions, short.generation_tokens) == (None, None)
    full = pickle.loads(pickle.dumps(BackendPromptTooLong(5000, 1792, 2048, 256)))
    assert str(full) == (
        "the prompt is 5,000 tokens but this model takes at most 1,792 (2,048 positions minus a generation "
        "budget of 256 tokens)"
    )
