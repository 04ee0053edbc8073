"""The typed message model (agentkit.messages): the codec, the one ToolCall, saved conversations of v1."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from agentkit import Agent
from agentkit.backends.scripted import ScriptedBackend, call
from agentkit.backends.textcalls import recover_calls
from agentkit.history import Conversation
from agentkit.messages import (
    AssistantMessage,
    ImageURLPart,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    decode_arguments,
    dump_message,
    parse_message,
    to_template_messages,
)

FIXTURE = Path(__file__).parent / "fixtures" / "conversation_v1.json"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def test_conversation_saved_before_the_message_model_loads_and_saves_back_byte_for_byte(
    tmp_path: Path,
) -> None:
    # tests/fixtures/conversation_v1.json was written by agentkit 264d103, before agentkit.messages existed
    conv = Conversation.load(FIXTURE)
    assert conv.turns == 2
    image, text = conv.messages[2]["content"]
    assert image["image_url"]["detail"] == "low" and image["vision_budget"] == 70
    assert text == {"type": "text", "text": "What colour is this image?"}
    out = tmp_path / "again.json"
    conv.save(out)
    assert out.read_bytes() == FIXTURE.read_bytes()


def test_saved_user_message_parses_to_typed_parts() -> None:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    msgs = [parse_message(m) for m in data["messages"]]
    assert [type(m).__name__ for m in msgs] == ["UserMessage", "AssistantMessage"] * 2
    user = msgs[2]
    assert isinstance(user, UserMessage) and isinstance(user.content, list)
    assert isinstance(user.content[0], ImageURLPart) and user.content[0].vision_budget == 70
    assert isinstance(user.content[1], TextPart)
    assert [dump_message(m) for m in msgs] == data["messages"]


def test_run_transcript_round_trips_through_the_codec() -> None:
    backend = ScriptedBackend([call("add", a=2, b=3), "5"])
    result = Agent(backend, [add], system_prompt="be brief").run("2+3?")
    typed = [parse_message(m) for m in result.messages]
    assert [m.role for m in typed] == ["system", "user", "assistant", "tool", "assistant"]
    assistant, tool = typed[2], typed[3]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls is not None
    assert assistant.tool_calls[0] == ToolCall(assistant.tool_calls[0].id, "add", {"a": 2, "b": 3})
    assert isinstance(tool, ToolMessage) and tool.content == "5" and tool.name == "add"
    assert [dump_message(m) for m in typed] == result.messages


def test_tool_call_codec_keeps_undecodable_arguments_as_text() -> None:
    bad = ToolCall("c1", "add", {}, "arguments are not valid JSON", '{"a":')
    assert bad.to_dict() == {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a":'},
    }
    back = ToolCall.from_dict(bad.to_dict())
    assert back.error is not None and back.raw_arguments == '{"a":' and back.arguments == {}
    ok = ToolCall.from_dict({"id": "c2", "function": {"name": "add", "arguments": '{"a": 1}'}})
    assert ok.arguments == {"a": 1} and ok.error is None
    with pytest.raises(ValueError, match="a tool call is"):
        ToolCall.from_dict({"id": "c3"})


def test_unknown_role_and_part_are_refused_by_name() -> None:
    with pytest.raises(pydantic.ValidationError, match="robot"):
        parse_message({"role": "robot", "content": "hi"})
    with pytest.raises(pydantic.ValidationError, match="audio"):
        parse_message({"role": "user", "content": [{"type": "audio", "data": ""}]})


def test_one_to_template_messages_turns_json_object_results_into_objects() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "c", "name": "t", "content": '{"x": 1}'},
        {"role": "tool", "tool_call_id": "d", "name": "t", "content": "[1, 2]"},
        {"role": "tool", "tool_call_id": "e", "name": "t", "content": "{not json"},
    ]
    out = to_template_messages(msgs)
    assert out[1]["content"] == {"x": 1}
    assert out[2]["content"] == "[1, 2]" and out[3]["content"] == "{not json"
    assert msgs[1]["content"] == '{"x": 1}'  # the input is not modified
    assert out[0] is msgs[0]


def test_serve_and_history_reuse_the_message_model() -> None:
    from agentkit import history
    from agentkit.serve import schemas

    assert history.TextPart is TextPart and history.ImageURLPart is ImageURLPart
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    req = schemas.ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [image, {"type": "text", "text": "hi"}]},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ],
        }
    )
    system, user, assistant, tool = req.messages
    assert [type(m).__name__ for m in req.messages] == [
        "SystemMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
    ]
    assert isinstance(user, UserMessage) and isinstance(user.content, list)
    assert [type(p).__name__ for p in user.content] == ["ImageURLPart", "TextPart"]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls == [
        ToolCall("c1", "f", {}, None, "{}")
    ]
    assert isinstance(tool, ToolMessage) and tool.name is None and system.role == "developer"
    with pytest.raises(pydantic.ValidationError, match="'input_audio'"):
        schemas.ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}
        )


def test_a_call_encodes_for_the_wire_with_json_text_arguments() -> None:
    ok = ToolCall("c1", "add", {"a": "é"})
    assert ok.to_dict(wire=True)["function"]["arguments"] == '{"a": "é"}'
    assert ok.to_dict()["function"]["arguments"] == {"a": "é"}
    bad = ToolCall("c2", "add", {}, "arguments are not valid JSON", '{"a":')
    assert bad.to_dict(wire=True)["function"]["arguments"] == '{"a":'
    assert ToolCall.from_dict({"id": None, "function": {"name": "f"}}).id == ""


def test_backend_call_type_is_the_message_call_type() -> None:
    from agentkit.backends.base import ModelTurn, ToolCallRequest
    from agentkit.backends.textcalls import recover_calls

    assert ToolCallRequest is ToolCall
    assert ModelTurn(tool_calls=[call("add", a=1, b=2)]).tool_calls[0].arguments == {"a": 1, "b": 2}
    found = recover_calls('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
    assert found.calls == [ToolCall("", "add", {"a": 1, "b": 2})]


def test_nan_and_infinity_in_a_call_are_not_json() -> None:
    assert decode_arguments('{"a": NaN}') == (
        {},
        "arguments are not valid JSON (NaN is not a JSON number at character 6)",
    )
    assert decode_arguments('{"a": -Infinity}')[1] == (
        "arguments are not valid JSON (-Infinity is not a JSON number at character 6)"
    )
    found = recover_calls('<tool_call>{"name": "add", "arguments": {"a": Infinity}}</tool_call>')
    assert (found.calls, found.problem) == (
        [],
        "<tool_call> number 1 does not hold valid JSON (Infinity is not a JSON number at character 35)",
    )
    assert recover_calls('{"name": "add", "arguments": {"a": NaN}}').problem == (
        "the text looks like a JSON call but is not valid JSON (NaN is not a JSON number at character 35)"
    )


def test_a_number_beyond_a_double_in_a_call_is_refused_not_read_as_infinity() -> None:
    # 1e400 was read as inf and written back as Infinity, which is not JSON
    assert decode_arguments('{"a": 1e400}') == (
        {},
        "arguments are not valid JSON (1e400 is beyond a double's range at character 6)",
    )
    assert decode_arguments('{"a": -2.5E+999}')[1] == (
        "arguments are not valid JSON (-2.5E+999 is beyond a double's range at character 6)"
    )
    assert decode_arguments('{"a": 1.5e308, "b": 1e-400}') == ({"a": 1.5e308, "b": 0.0}, None)
    found = recover_calls('<tool_call>{"name": "add", "arguments": {"a": 1e400}}</tool_call>')
    assert found.calls == [] and "1e400 is beyond a double's range at character 35" in str(found.problem)


def test_history_messages_are_the_one_models_user_and_assistant_messages() -> None:
    from agentkit.history import SavedConversation

    turn = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    saved = SavedConversation.model_validate(
        {"format": "agentkit.conversation", "version": 1, "messages": turn}
    )
    assert [type(m) for m in saved.messages] == [UserMessage, AssistantMessage]
    assert [dump_message(m) for m in saved.messages] == turn
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]
    with pytest.raises(pydantic.ValidationError, match="message 1 is an assistant tool-call message"):
        SavedConversation.model_validate(
            {
                "format": "agentkit.conversation",
                "version": 1,
                "messages": [turn[0], {"role": "assistant", "content": None, "tool_calls": calls}],
            }
        )
