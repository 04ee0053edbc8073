"""The embedded backend end to end on a tiny random-weight DiffusionGemma checkpoint (CPU).

Random weights say nothing about answer quality; what is checked is the contract: constrained denoising
yields tool calls that parse and validate against the tool's schema, the planner runs them, tool responses
reach the chat template in the native Gemma form, usage is reported, and a seed makes turns reproducible.
"""

import asyncio
import json
import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from sample_tools import get_weather  # noqa: E402

from agentkit import Agent, BackendError, MaxStepsExceeded  # noqa: E402
from agentkit.backends.embedded import EmbeddedBackend  # noqa: E402
from agentkit.messages import to_template_messages  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("emb"), canvas_length=16, generation={"max_denoising_steps": 8}
    )


@pytest.fixture(scope="module")
def chat_model(ckpt):
    from model.turn.chat import ChatModel

    return ChatModel.load(str(ckpt))


def run_forced(chat_model, seed=0):
    backend = EmbeddedBackend(chat_model=chat_model, seed=seed, max_new_tokens=48)
    agent = Agent(backend, [get_weather], tool_choice={"name": "get_weather"}, max_steps=2, loop_guard=None)
    try:
        return agent.run("Weather in Paris?"), backend
    except MaxStepsExceeded as exc:  # random weights may call again after the forced first turn
        return exc.result, backend


def test_forced_call_is_valid_and_runs(chat_model):
    result, backend = run_forced(chat_model)
    first = result.steps[0]
    assert first.tool_calls, "tool_choice={'name': ...} must produce a call"
    for rec in first.tool_calls:
        assert rec.name == "get_weather"
        assert rec.error is None, rec.error  # parsed, validated and executed
        get_weather.validate(rec.arguments)
        assert json.loads(rec.content) == {
            "city": rec.arguments["city"],
            "days": rec.arguments.get("days", 1),
            "sky": "clear",
        }
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0 and first.usage.requests == 1
    assert result.backend.startswith("embedded:")
    # the tool response reaches the chat template as a native Gemma response object
    prompt = backend.chat_model.render(to_template_messages(result.messages), [get_weather.declaration()])
    assert "<|tool_response>response:get_weather{" in prompt
    assert "<|tool_call>call:get_weather{" in prompt


def test_a_dotted_tool_name_as_mcp_servers_give_is_declared_called_and_run(chat_model):
    from agentkit import tool

    seen = []

    @tool(name="fs.read")
    def read(path: str) -> str:
        """Read a file."""
        seen.append(path)
        return "hello"

    backend = EmbeddedBackend(chat_model=chat_model, seed=0, max_new_tokens=48)
    agent = Agent(backend, [read], tool_choice={"name": "fs.read"}, max_steps=2, loop_guard=None)
    try:
        result = agent.run("Read notes.txt")
    except MaxStepsExceeded as exc:  # random weights may call again after the forced first turn
        result = exc.result
    (rec, *_) = result.steps[0].tool_calls
    assert (rec.name, rec.error, rec.content) == ("fs.read", None, "hello")
    assert seen[0] == rec.arguments["path"]
    prompt = backend.chat_model.render(to_template_messages(result.messages), [read.declaration()])
    assert "declaration:fs.read{" in prompt and "<|tool_call>call:fs.read{" in prompt


def test_seeded_turns_are_reproducible(chat_model):
    a, _ = run_forced(chat_model, seed=3)
    b, _ = run_forced(chat_model, seed=3)
    assert [(c.name, c.arguments) for c in a.steps[0].tool_calls] == [
        (c.name, c.arguments) for c in b.steps[0].tool_calls
    ]


def test_tool_choice_none_gives_prose(chat_model):
    backend = EmbeddedBackend(chat_model=chat_model, seed=0, max_new_tokens=32)
    result = Agent(backend, [get_weather], tool_choice="none").run("Hello")
    assert result.steps[0].tool_calls == []
    assert isinstance(result.answer, str)


def test_missing_checkpoint_is_a_backend_error(tmp_path):
    backend = EmbeddedBackend(tmp_path / "nope")
    with pytest.raises(BackendError, match="checkpoint folder does not exist"):
        Agent(backend).run("hi")


def test_tool_schema_is_normalised_once_when_registered(chat_model, monkeypatch):
    import grammar.turn as turn
    import schema.spec as spec_mod
    from schema import ToolSpec

    calls = []
    real = spec_mod.normalize_tool

    def counting(tool):
        calls.append(isinstance(tool, ToolSpec))
        return real(tool)

    monkeypatch.setattr(turn, "normalize_tool", counting)
    backend = EmbeddedBackend(chat_model=chat_model, seed=0, max_new_tokens=48)
    Agent(backend, [get_weather], tool_choice={"name": "get_weather"}, max_steps=2, loop_guard=None)
    spec = backend.tool_specs([get_weather.declaration()])[0]
    assert isinstance(spec, ToolSpec) and spec.name == "get_weather"
    assert spec.parameters == real(get_weather.declaration()).parameters
    calls.clear()
    turn = backend.complete([{"role": "user", "content": "Weather in Paris?"}], [get_weather.declaration()])
    assert calls and all(calls)  # the grammar got the kept ToolSpec, never a dict to normalise again
    assert all(c.name == "get_weather" for c in turn.tool_calls)
    # a declaration the backend never checked (another schema) is normalised by the grammar
    other = {
        "type": "function",
        "function": {
            **get_weather.declaration()["function"],
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    assert backend.tool_specs([other]) == [other]


def test_the_kept_tool_spec_is_found_by_name_and_schema_not_by_object_identity(tmp_path):
    import copy

    from schema import ToolSpec, fingerprint

    backend = EmbeddedBackend(tmp_path / "never-loaded")
    params = {
        "type": "object",
        "properties": {"city": {"type": "string", "title": "City"}},
        "required": ["city"],
    }
    backend.check_tool("weather", params)
    decl = {"type": "function", "function": {"name": "weather", "parameters": params}}
    [kept] = backend.tool_specs([decl])
    assert isinstance(kept, ToolSpec) and kept.parameters["properties"] == {"city": {"type": "string"}}
    # an equal copy (a bundle reloaded, a declaration rebuilt per turn) finds it too
    assert backend.tool_specs([copy.deepcopy(decl)]) == [kept]
    # the same name with another schema, another name with the same schema: the declaration itself
    other = copy.deepcopy(decl)
    other["function"]["parameters"]["properties"]["days"] = {"type": "integer"}
    renamed = {"type": "function", "function": {"name": "weather2", "parameters": params}}
    assert backend.tool_specs([other, renamed]) == [other, renamed]
    # property order is part of the key (it fixes the order of the call's arguments)
    assert fingerprint({"a": 1, "b": 2}) != fingerprint({"b": 2, "a": 1})
    assert fingerprint(params) == fingerprint(copy.deepcopy(params)) and len(fingerprint(params)) == 64
    # parameters that are not JSON are left to the grammar to refuse
    odd = {"type": "function", "function": {"name": "weather", "parameters": {"x": object()}}}
    assert backend.tool_specs([odd]) == [odd]


@pytest.mark.parametrize("bundle", ["code_search", "weather", "greenhouse"])
def test_the_kept_tool_spec_gives_the_same_grammar_as_the_declaration(bundle):
    from pathlib import Path

    from agentkit.backends.embedded import normalized_tool
    from agentkit.bundle import load_bundle
    from grammar.turn import tool_call_grammar

    root = Path(__file__).resolve().parents[1]
    decls = [t.declaration() for t in load_bundle(root / "examples" / bundle / "bundle.yaml").tools]
    specs = [normalized_tool(d["function"]["name"], d["function"]["parameters"]) for d in decls]
    assert decls and all(s.name == d["function"]["name"] for s, d in zip(specs, decls, strict=True))
    for choice in ("auto", "required"):
        assert tool_call_grammar(specs, tool_choice=choice) == tool_call_grammar(decls, tool_choice=choice)


def test_threads_that_load_a_cold_backend_at_once_share_one_load(ckpt):
    # two threads' first runs on one cold agent each loaded the checkpoint at once: both failed ("Unsupported
    # device type 'meta'") and so did every later load in the process
    backend = EmbeddedBackend(ckpt, threads=1)
    start, got, errors = threading.Barrier(3), [], []

    def first_use() -> None:
        start.wait()
        try:
            got.append(backend.chat_model)
        except Exception as exc:  # the assertion below names it
            errors.append(exc)

    workers = [threading.Thread(target=first_use) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == [] and len(got) == 3
    assert got[0] is got[1] is got[2]
    assert EmbeddedBackend(ckpt, threads=1).chat_model is not got[0]  # a later load in the process works


class GatedChatModel:
    """A chat model whose turn waits (at most 10 s) for a task of the event loop to run while it denoises."""

    default_binder = None

    def __init__(self) -> None:
        self.started = threading.Event()
        self.loop_ran = threading.Event()

    def chat(self, messages, **options):
        self.thread = threading.current_thread()
        self.started.set()
        ran = self.loop_ran.wait(10)
        return SimpleNamespace(text=f"loop ran: {ran}", thinking="", tool_calls=[], prompt_tokens=3)


def test_arun_leaves_the_event_loop_free_while_the_model_denoises():
    # the turn ran on the event loop's thread: every other task of the loop (another run, an async tool's
    # timeout, a web server's requests) stood still for the whole generation
    gated = GatedChatModel()
    agent = Agent(EmbeddedBackend(chat_model=gated, binding="none"))

    async def main():
        async def beside() -> None:
            while not gated.started.is_set():
                await asyncio.sleep(0.01)
            gated.loop_ran.set()

        result, _ = await asyncio.gather(agent.arun("?"), beside())
        return result

    result = asyncio.run(main())
    assert result.answer == "loop ran: True"
    assert result.usage.input_tokens == 3


def test_a_cancelled_arun_does_not_hold_up_the_loop_s_shutdown():
    # on asyncio's default executor, asyncio.run (Ctrl-C included) waited at its shutdown for the cancelled
    # run's turn to finish denoising
    gated = GatedChatModel()
    agent = Agent(EmbeddedBackend(chat_model=gated, binding="none"))

    async def main():
        run = asyncio.create_task(agent.arun("?"))
        while not gated.started.is_set():
            await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    try:
        assert (
            gated.thread.is_alive() and gated.thread.daemon
        )  # still denoising; the loop did not wait for it
    finally:
        gated.loop_ran.set()
        gated.thread.join()
