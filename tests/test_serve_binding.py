"""``agentkit serve`` enforces a client's schemas as written unless the server (or the request) asks for a
binder."""

from __future__ import annotations

from serve_helpers import WEATHER

from agentkit.serve import schemas as S


def _last_constraint_tools(engine, **body):
    """The tools of the last constraint ``engine.prepare`` built for a weather request, and the turn."""
    seen = []
    cm = engine.chat_model
    real = cm.make_constraint

    def spy(tools, *args, **kwargs):
        seen.append(tools)
        return real(tools, *args, **kwargs)

    cm.make_constraint = spy
    try:
        messages = [{"role": "user", "content": "What is the weather in Oslo right now?"}]
        req = S.ChatCompletionRequest(model="agentkit-tiny", messages=messages, tools=[WEATHER], **body)
        turn, _ = engine.prepare(req)
    finally:
        del cm.make_constraint
    return seen[-1], turn


def test_serve_enforces_client_schemas_as_written_unless_started_with_a_binder(engine, monkeypatch):
    assert engine.binding == "none"  # the default of load_engine and `agentkit serve`
    tools, turn = _last_constraint_tools(engine)
    assert tools == [WEATHER] and turn.prefill is None  # the client's declaration, untouched
    monkeypatch.setattr(engine, "binding", "copy-head")  # as `agentkit serve --binding copy-head`
    tools, turn = _last_constraint_tools(engine)
    city = tools[0].parameters["properties"]["city"]
    assert "Oslo" in city["enum"] and tools[0].parameters["required"] == ["city"]
    assert turn.prefill is not None
    tools, _ = _last_constraint_tools(engine, binding="none")  # the request's own choice wins
    assert tools == [WEATHER]


def test_parallel_tool_calls_false_allows_one_call(engine, monkeypatch):
    import inspect

    seen = []
    real = engine.chat_model.make_constraint
    signature = inspect.signature(real)

    def spy(*args, **kwargs):
        seen.append(signature.bind(*args, **kwargs).arguments.get("parallel_tool_calls", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.chat_model, "make_constraint", spy)
    messages = [{"role": "user", "content": "Weather in Oslo and in Bergen"}]
    for flag, parallel in ((None, True), (False, False), (True, True)):
        req = S.ChatCompletionRequest(
            model="agentkit-tiny", messages=messages, tools=[WEATHER], parallel_tool_calls=flag
        )
        engine.prepare(req)
        assert seen[-1] is parallel


def test_a_served_request_with_a_binder_encodes_its_prompt_once(engine, monkeypatch):
    """The binder's prefill (``turn.prefill``) is what the batcher admits: one encoder pass over the prompt, one
    per committed canvas the request goes on from, and the tokens of a request whose batcher encodes again."""
    monkeypatch.setattr(engine, "binding", "copy-head")
    canvas = engine.chat_model.settings.canvas_length
    messages = [
        {
            "role": "user",
            "content": "Weather in Oslo, Bergen, Paris, London, Rome, Madrid and Tokyo, metric, each one",
        }
    ]
    req = S.ChatCompletionRequest(model="agentkit-tiny", messages=messages, tools=[WEATHER])
    widths: list[int] = []  # the encoder's input width per call: the prompt's length or a canvas
    hook = engine.chat_model.model.model.encoder.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(int(kw["input_ids"].shape[1])), with_kwargs=True
    )
    canvases: list[list[int]] = []
    try:
        turn, _ = engine.prepare(req)
        assert turn.prefill is not None and len(turn.input_ids) > canvas
        got = engine.submit(turn, seed=2, on_canvas=canvases.append).handle.future.result(timeout=300)
    finally:
        hook.remove()
    assert [w for w in widths if w != canvas] == [len(turn.input_ids)]  # the prompt, once (in prepare)
    assert widths.count(canvas) == len(canvases) - 1  # the last canvas is not encoded
    again, _ = engine.prepare(req)
    again.prefill = None  # the batcher encodes the prompt itself, as before it took the binder's prefill
    assert engine.submit(again, seed=2).handle.future.result(timeout=300).tokens == got.tokens
