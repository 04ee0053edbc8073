"""Remote-model quirks at the public API, against a fake OpenAI server (httpx.MockTransport): calls written as
text in ``content``, inline thinking, reasoning replay within a turn, tool-name slips, argument formats, and
the declared schema."""

import copy
import json
from datetime import datetime

import httpx
import llguidance
import pytest
from openai_fakes import completion
from sample_tools import add, get_weather

from agentkit import Agent, ChatSession, Tool, ToolCallFormatError, tool
from agentkit.backends.openai import OpenAIBackend
from agentkit.backends.textcalls import recover_calls, split_thinking
from schema import grammar_format_checker


class FakeServer:
    """Replays JSON responses and records request bodies."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.bodies = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.responses.pop(0))


def backend_for(server, **kw):
    return OpenAIBackend(
        "dg-test",
        base_url="http://fake.local/v1",
        retry_wait=0.0,
        transport=httpx.MockTransport(server),
        **kw,
    )


def all_text(body):
    return json.dumps(body["messages"], ensure_ascii=False)


# ------------------------------------------------------------------------------ calls written as text

WEATHER_ARGS = {"city": "Paris", "days": 2}
TEXT_CALLS = {
    "gemma": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
    "gemma_unclosed": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}',
    "gemma_json": '<|tool_call>{"name":"get_weather","arguments":{"city":"Paris","days":2}}<tool_call|>',
    "hermes": 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>',
    "hermes_string_args": '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", \\"days\\": 2}"}</tool_call>',
    "bare_json": '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',
    "bare_json_parameters": '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
    "fenced_json": '```json\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n```',
}


@pytest.mark.parametrize("fmt", sorted(TEXT_CALLS))
def test_call_written_as_text_is_recovered_and_run(fmt):
    server = FakeServer([completion(content=TEXT_CALLS[fmt], tool_calls=[]), completion(content="Clear.")])
    result = Agent(backend_for(server), [get_weather, add]).run("Weather in Paris in 2 days?")
    assert result.answer == "Clear."
    [rec] = result.steps[0].tool_calls
    assert (rec.name, rec.arguments, rec.error) == ("get_weather", WEATHER_ARGS, None)
    assert rec.content == '{"city":"Paris","days":2,"sky":"clear"}'
    assistant, tool_msg = server.bodies[1]["messages"][-2:]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": json.dumps(WEATHER_ARGS),
    }
    assert "tool_call" not in (assistant["content"] or "") and "get_weather" not in (
        assistant["content"] or ""
    )
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == assistant["tool_calls"][0]["id"]


def test_several_text_calls_and_prose_around_them():
    content = (
        "Checking both.\n"
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>'
    )
    server = FakeServer([completion(content=content), completion(content="3 and 7.")])
    result = Agent(backend_for(server), [add]).run("1+2 and 3+4?")
    assert [r.content for r in result.steps[0].tool_calls] == ["3", "7"]
    assert result.steps[0].text == "Checking both."
    assert result.answer == "3 and 7."


@pytest.mark.parametrize(
    "answer",
    [
        "It is sunny in Paris.",
        '{"city": "Paris", "temperature": 21}',
        '{"name": "Paris", "population": 2100000}',
        'The tool format is {"name": ..., "arguments": ...}, but here is the answer: 42.',
    ],
)
def test_prose_and_plain_json_answers_stay_answers(answer):
    server = FakeServer([completion(content=answer)])
    result = Agent(backend_for(server), [get_weather]).run("?")
    assert result.answer == answer
    assert result.steps[0].tool_calls == []


def test_no_recovery_without_tools_or_with_tool_choice_none():
    text = TEXT_CALLS["bare_json"]
    server = FakeServer([completion(content=text)])
    assert Agent(backend_for(server), []).run("?").answer == text
    server = FakeServer([completion(content=text)])
    assert Agent(backend_for(server), [get_weather], tool_choice="none").run("?").answer == text


BROKEN = {
    "hermes": '<tool_call>{"name": "get_weather", "arguments": {"city": }</tool_call>',
    "gemma": "<|tool_call>call:get_weather{city:Paris}<tool_call|>",
    "bare_json": '{"name": "get_weather", "arguments": {"city": "Paris"',
    "stripped_markers": "call:get_weather{city:Paris}",
}


@pytest.mark.parametrize("fmt", sorted(BROKEN))
def test_unparseable_call_text_gets_a_format_reminder_not_an_answer(fmt):
    server = FakeServer(
        [
            completion(content=BROKEN[fmt]),
            completion(tool_calls=[("c1", "get_weather", '{"city": "Paris"}')]),
            completion(content="Clear."),
        ]
    )
    result = Agent(backend_for(server), [get_weather, add]).run("Weather?")
    assert result.answer == "Clear."
    assert result.steps[0].tool_calls == [] and result.steps[0].text == BROKEN[fmt]
    broken_echo, reminder = server.bodies[1]["messages"][-2:]
    assert broken_echo == {"role": "assistant", "content": BROKEN[fmt]}
    assert reminder["role"] == "user"
    assert reminder["content"].startswith("Your last message was not used: it looks like a tool call, but ")
    assert "Tools: get_weather, add." in reminder["content"]
    assert result.steps[1].tool_calls[0].content == '{"city":"Paris","days":1,"sky":"clear"}'
    # the reminder exchange is part of this turn only
    assert result.conversation.messages == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Clear."},
    ]


def test_format_reminders_are_bounded():
    broken = BROKEN["hermes"]
    server = FakeServer([completion(content=broken)] * 3)
    with pytest.raises(
        ToolCallFormatError, match=r"does not parse 2 times in this run \(max_format_retries=1\)"
    ) as ei:
        Agent(backend_for(server), [get_weather], max_format_retries=1).run("Weather?")
    assert len(server.bodies) == 2
    assert ei.value.result.answer is None
    assert ei.value.result.stop_reason == "format_retries"
    assert [s.text for s in ei.value.result.steps] == [broken, broken]
    with pytest.raises(ValueError, match="max_format_retries must be an integer >= 0"):
        Agent(backend_for(server), [get_weather], max_format_retries=-1)


# ------------------------------------------------------------------------------------- inline thinking

THOUGHTS = {
    "gemma": "<|channel>thought\nThe user wants a greeting.<channel|>Hello!",
    "think": "<think>The user wants a greeting.</think>\n\nHello!",
    "think_opened_by_template": "The user wants a greeting.</think>Hello!",
}


@pytest.mark.parametrize("fmt", sorted(THOUGHTS))
def test_inline_thinking_is_split_from_the_answer_and_the_history(fmt):
    server = FakeServer([completion(content=THOUGHTS[fmt]), completion(content="Bye!")])
    chat = ChatSession(Agent(backend_for(server), [get_weather]))
    first = chat.send("Greet me.")
    assert first.answer == "Hello!"
    assert first.steps[0].thinking == "The user wants a greeting."
    assert chat.conversation.messages[-1] == {"role": "assistant", "content": "Hello!"}
    chat.send("Now say bye.")
    sent = all_text(server.bodies[1])
    assert "The user wants a greeting" not in sent and "think" not in sent and "channel" not in sent
    assert server.bodies[1]["messages"][1] == {"role": "assistant", "content": "Hello!"}


def test_inline_thinking_before_a_text_call():
    content = "<|channel>thought\nI need the weather.<channel|>" + TEXT_CALLS["gemma"]
    server = FakeServer([completion(content=content), completion(content="Clear.")])
    result = Agent(backend_for(server), [get_weather]).run("Weather?")
    assert result.steps[0].thinking == "I need the weather."
    assert result.steps[0].tool_calls[0].arguments == WEATHER_ARGS
    assert result.answer == "Clear."


def test_split_thinking_edge_cases():
    assert split_thinking("no thinking here") == ("no thinking here", "")
    assert split_thinking("Answer.<think>cut off mid-thought") == ("Answer.", "cut off mid-thought")
    assert split_thinking("<think>a</think>x<think>b</think>y") == ("xy", "a\n\nb")


# ------------------------------------------------------------------------------------ reasoning replay


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_is_replayed_within_the_turn_and_dropped_at_the_next_user_turn(key):
    server = FakeServer(
        [
            completion(
                tool_calls=[("c1", "add", '{"a": 1, "b": 2}')], reasoning="add them", reasoning_key=key
            ),
            completion(
                tool_calls=[("c2", "add", '{"a": 3, "b": 3}')], reasoning="add again", reasoning_key=key
            ),
            completion(content="6", reasoning="done", reasoning_key=key),
            completion(content="ok"),
        ]
    )
    chat = ChatSession(Agent(backend_for(server), [add]))
    chat.send("(1+2)+3?")
    second, third = server.bodies[1]["messages"], server.bodies[2]["messages"]
    assert second[-2][key] == "add them"
    assert [m.get(key) for m in third if m["role"] == "assistant"] == ["add them", "add again"]
    chat.send("thanks")
    next_turn = server.bodies[3]["messages"]
    assert next_turn == [
        {"role": "user", "content": "(1+2)+3?"},
        {"role": "assistant", "content": "6"},
        {"role": "user", "content": "thanks"},
    ]


def test_reasoning_replay_can_be_turned_off_or_set_for_inline_thinking():
    responses = [
        completion(tool_calls=[("c1", "add", '{"a": 1, "b": 2}')], reasoning="add them"),
        completion(content="3"),
    ]
    server = FakeServer(responses)
    Agent(backend_for(server, replay_reasoning=False), [add]).run("1+2?")
    assert "reasoning_content" not in server.bodies[1]["messages"][-2]
    assert "add them" not in all_text(server.bodies[1])
    # inline thinking (no reasoning field from the server) is replayed only under a field you name
    inline = "<|channel>thought\nadd them<channel|>" + "<|tool_call>call:add{a:1,b:2}<tool_call|>"
    server = FakeServer([completion(content=inline), completion(content="3")])
    Agent(backend_for(server), [add]).run("1+2?")
    assert "add them" not in all_text(server.bodies[1])
    server = FakeServer([completion(content=inline), completion(content="3")])
    Agent(backend_for(server, reasoning_field="reasoning"), [add]).run("1+2?")
    assert server.bodies[1]["messages"][-2]["reasoning"] == "add them"


# ---------------------------------------------------------------------------------------- tool names


def test_functions_prefix_is_accepted_and_unknown_names_get_the_nearest():
    server = FakeServer(
        [
            completion(
                tool_calls=[
                    ("c1", "functions.get_weather", '{"city": "Oslo"}'),
                    ("c2", "get_wether", '{"city": "Oslo"}'),
                    ("c3", "Weather forecast for a city.", '{"city": "Oslo"}'),
                    ("c4", "translate", "{}"),
                ]
            ),
            completion(content="ok"),
        ]
    )
    result = Agent(backend_for(server), [get_weather, add]).run("?")
    ok, typo, description, unrelated = result.steps[0].tool_calls
    assert (ok.name, ok.error, ok.content) == ("get_weather", None, '{"city":"Oslo","days":1,"sky":"clear"}')
    assert server.bodies[1]["messages"][-5]["tool_calls"][0]["function"]["name"] == "get_weather"
    for rec, wrong in ((typo, "get_wether"), (description, "Weather forecast for a city.")):
        payload = json.loads(rec.content)
        assert rec.error_kind == "unknown_tool"
        assert payload["error"] == f"unknown tool {wrong!r}"
        assert payload["did_you_mean"] == "get_weather"
        assert payload["valid_tools"] == ["get_weather", "add"]
    assert "did_you_mean" not in json.loads(unrelated.content)


def test_functions_prefix_never_shadows_a_tool_of_that_exact_name():
    def lookup(q: str) -> str:
        return "plain"

    def namespaced(q: str) -> str:
        return "namespaced"

    server = FakeServer(
        [completion(tool_calls=[("c1", "functions.lookup", '{"q": "x"}')]), completion(content="ok")]
    )
    agent = Agent(backend_for(server), [Tool(lookup), Tool(namespaced, name="functions.lookup")])
    assert agent.run("?").steps[0].tool_calls[0].content == "namespaced"


# ------------------------------------------------------------------------------------ argument formats

EMAIL_TOOL_PARAMS = {
    "type": "object",
    "properties": {"to": {"type": "string", "format": "email"}, "body": {"type": "string"}},
    "required": ["to"],
}


def test_remote_arguments_are_checked_with_the_grammars_formats():
    sent = []

    def send_mail(to: str, body: str = "") -> str:
        sent.append(to)
        return "sent"

    server = FakeServer(
        [
            completion(tool_calls=[("c1", "send_mail", '{"to": "bob at example"}')]),
            completion(tool_calls=[("c2", "send_mail", '{"to": "bob@example.com"}')]),
            completion(content="done"),
        ]
    )
    result = Agent(backend_for(server), [Tool(send_mail, parameters=EMAIL_TOOL_PARAMS)]).run("mail bob")
    bad = result.steps[0].tool_calls[0]
    assert bad.error_kind == "invalid_arguments"
    assert bad.error == "invalid arguments: to: 'bob at example' is not a 'email'"
    assert sent == ["bob@example.com"]


def test_typed_function_formats_are_checked_too():
    @tool
    def remind(when: datetime) -> str:
        """Set a reminder."""
        return when.isoformat()

    assert remind.parameters["properties"]["when"]["format"] == "date-time"
    server = FakeServer(
        [
            completion(tool_calls=[("c1", "remind", '{"when": "2026-01-02 10:00"}')]),
            completion(tool_calls=[("c2", "remind", '{"when": "2026-01-02T10:00:00Z"}')]),
            completion(content="set"),
        ]
    )
    result = Agent(backend_for(server), [remind]).run("remind me")
    assert (
        result.steps[0].tool_calls[0].error
        == "invalid arguments: when: '2026-01-02 10:00' is not a 'date-time'"
    )
    assert result.steps[1].tool_calls[0].content == "2026-01-02T10:00:00+00:00"


FORMAT_SAMPLES = {
    "date": ["2026-02-28", "2026-02-30", "26-01-01"],
    "time": ["10:00:00Z", "10:00:00", "25:00:00Z"],
    "date-time": ["2026-01-02T10:00:00+01:00", "2026-01-02 10:00:00Z", "2026-01-02T10:00Z"],
    "duration": ["P1DT2H", "PT", "P1W"],
    "email": ["bob@example.com", "bob@", "a.b+c@[10.0.0.1]"],
    "hostname": ["example.com", "-bad.com", "a"],
    "ipv4": ["10.0.0.1", "256.0.0.1", "1.2.3"],
    "ipv6": ["::1", "2001:db8::8a2e:370:7334", "1:::2"],
    "uuid": [
        "123e4567-e89b-12d3-a456-426614174000",
        "123e4567e89b12d3a456426614174000",
        "g23e4567-e89b-12d3-a456-426614174000",
    ],
    "uri": ["https://example.com/a?b#c", "example.com", "mailto:bob@example.com"],
}


def test_format_checker_checks_exactly_what_the_grammar_enforces():
    from grammar.llg import llg_tokenizer
    from grammar.parse import format_value
    from grammar.turn import value_grammar
    from model.checkpoint.tokenizer import build_tokenizer
    from schema import FORMATS

    checker = grammar_format_checker()
    assert set(checker.checkers) == set(FORMATS)
    corpus = [s for xs in FORMAT_SAMPLES.values() for s in xs] * 5
    tok = build_tokenizer(corpus, vocab_size=512, min_frequency=1)
    ll = llg_tokenizer(tok)
    for fmt, samples in FORMAT_SAMPLES.items():
        grammar = value_grammar({"type": "string", "format": fmt})
        verdicts = []
        for s in samples:
            ids = tok.encode(format_value(s), add_special_tokens=False)
            m = llguidance.LLMatcher(ll, grammar, log_level=0)
            by_grammar = m.try_consume_tokens(ids) == len(ids) and m.is_accepting()
            assert by_grammar == checker.conforms(s, fmt), (fmt, s)
            verdicts.append(by_grammar)
        assert True in verdicts and False in verdicts, fmt  # each format's samples exercise both sides


# ---------------------------------------------------------------------------------- declared schemas


def test_schema_declared_to_the_server_is_the_one_written():
    params = {
        "type": "object",
        "title": "Labels",
        "patternProperties": {"^x-[a-z]+$": {"type": "string", "title": "extension"}},
        "additionalProperties": False,
        "$defs": {"unused": {"type": "integer"}},
    }
    written = copy.deepcopy(params)

    def label(**kw: str) -> str:
        return "ok"

    t = Tool(label, parameters=params)
    params["title"] = "edited after registration"
    server = FakeServer([completion(content="fine")])
    Agent(backend_for(server), [t]).run("?")
    assert server.bodies[0]["tools"][0]["function"]["parameters"] == written
    assert t.validate({"x-ab": "1"}) == {"x-ab": "1"}


def test_recover_calls_reports_where_a_call_is_broken():
    found = recover_calls('<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>')
    assert found.calls == []
    assert (
        found.problem
        == "<tool_call> number 1 does not hold valid JSON (Expecting property name enclosed in double quotes at character 35)"
    )


def test_a_reply_cut_inside_a_thinking_block_gets_a_reminder_not_an_empty_answer():
    server = FakeServer(
        [completion(content="<think>I should call the tool... and then"), completion(content="It is 3.")]
    )
    result = Agent(backend_for(server), [add]).run("What is 1 plus 2?")
    assert result.answer == "It is 3."
    reminder = server.bodies[1]["messages"][-1]
    assert reminder["role"] == "user" and "ended inside a thinking block" in reminder["content"]
