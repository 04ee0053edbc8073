"""History keeps user messages and final answers only; conversations round-trip through JSON exactly."""

import asyncio
import json

import pytest

from agentkit import Agent, Conversation, MaxStepsExceeded, tool
from agentkit.backends.scripted import ScriptedBackend, answer, call, turn


@tool
def lookup(city: str) -> dict:
    """Look up a city."""
    return {"city": city, "population_m": {"Paris": 2.1, "Oslo": 0.7}.get(city)}


def make_agent(script):
    backend = ScriptedBackend(script)
    return Agent(backend, [lookup], system_prompt="You answer with facts."), backend


def test_finished_turns_keep_only_question_and_final_answer():
    agent, backend = make_agent(
        [
            turn(call("lookup", city="Paris"), thinking="I need the population.", text="Looking it up."),
            answer("Paris has 2.1 million people.", thinking="Done thinking."),
            call("lookup", city="Oslo"),
            answer("Oslo has 0.7 million."),
        ]
    )
    session = agent.chat()
    r1 = session.send("How many people live in Paris?")
    assert r1.steps[0].thinking == "I need the population."  # the result keeps it...
    assert session.conversation.messages == [  # ...the history does not
        {"role": "user", "content": "How many people live in Paris?"},
        {"role": "assistant", "content": "Paris has 2.1 million people."},
    ]
    session.send("And Oslo?")
    first_request_turn2 = backend.requests[2].messages
    assert first_request_turn2 == [
        {"role": "system", "content": "You answer with facts."},
        {"role": "user", "content": "How many people live in Paris?"},
        {"role": "assistant", "content": "Paris has 2.1 million people."},
        {"role": "user", "content": "And Oslo?"},
    ]
    text = json.dumps(first_request_turn2)
    assert "thinking" not in text and "tool" not in text and "Looking it up" not in text
    # within the turn the trajectory is kept
    second_request_turn2 = backend.requests[3].messages
    assert [m["role"] for m in second_request_turn2] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert json.loads(second_request_turn2[-1]["content"]) == {"city": "Oslo", "population_m": 0.7}
    assert session.conversation.turns == 2


def test_thinking_is_kept_inside_the_turn_trajectory():
    agent, backend = make_agent([turn(call("lookup", city="Paris"), thinking="plan"), "ok"])
    agent.run("q")
    assert backend.requests[1].messages[-2]["thinking"] == "plan"


def test_conversation_json_round_trip_is_exact(tmp_path):
    agent, _ = make_agent([call("lookup", city="Paris"), "Deux millions — environ 2,1 M.", "Ça va ✓"])
    session = agent.chat()
    session.send("Population de Paris ?")
    session.send("Merci 🙂")
    conv = session.conversation
    conv.metadata["user"] = {"id": 7, "tags": ["fr"]}
    text = conv.to_json()
    back = Conversation.from_json(text)
    assert back == conv
    assert back.to_json() == text
    path = tmp_path / "conv.json"
    conv.save(path)
    assert Conversation.load(path) == conv


def test_resumed_conversation_sends_identical_messages():
    script = ["A1", "A2", "A3"]
    agent, backend = make_agent(list(script))
    s = agent.chat()
    s.send("Q1")
    s.send("Q2")
    saved = s.conversation.to_json()
    s.send("Q3")
    agent2, backend2 = make_agent(["A3"])
    s2 = agent2.chat(Conversation.from_json(saved))
    s2.send("Q3")
    assert backend2.requests[0].messages == backend.requests[2].messages
    assert s2.conversation == s.conversation


def test_failed_turn_leaves_history_unchanged():
    agent, _ = make_agent(["A1", call("lookup", city="x"), call("lookup", city="y")])
    agent.max_steps = 2
    s = agent.chat()
    s.send("Q1")
    before = s.conversation.to_json()
    with pytest.raises(MaxStepsExceeded):
        s.send("Q2")
    assert s.conversation.to_json() == before


def test_history_passed_to_run_is_not_modified():
    agent, _ = make_agent(["A2"])
    hist = Conversation([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}])
    result = agent.run("Q2", history=hist)
    assert hist.turns == 1
    assert result.conversation.turns == 2


def test_history_may_be_a_list_of_messages_and_is_not_modified():
    agent, backend = make_agent(["A2", "A3"])
    hist = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}]
    result = agent.run("Q2", history=hist)
    assert [m["content"] for m in backend.requests[0].messages] == [
        "You answer with facts.",
        "Q1",
        "A1",
        "Q2",
    ]
    assert result.conversation.turns == 2 and len(hist) == 2
    session = agent.chat(hist)
    session.send("Q3")
    assert [m["content"] for m in session.conversation.messages] == ["Q1", "A1", "Q3", "A3"]
    assert len(hist) == 2


@pytest.mark.parametrize(
    ("history", "error", "message"),
    [
        ("Q1", TypeError, "history must be an agentkit.history.Conversation or a list of messages"),
        ("Q1", TypeError, "got str"),
        (
            {"format": "agentkit.conversation", "version": 1, "messages": []},
            TypeError,
            "got dict (a saved conversation's dict: Conversation.from_dict)",
        ),
        ([{"role": "system", "content": "x"}], ValueError, "message 0 has role 'system'"),
        (
            [
                {"role": "user", "content": "Q1"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
                {"role": "tool", "tool_call_id": "c", "content": "3"},
                {"role": "assistant", "content": "A1"},
            ],
            ValueError,
            "message 1 is an assistant tool-call message: a history keeps only user messages and final answers",
        ),
        (
            [{"role": "user", "content": "Q1"}, {"role": "tool", "content": "3"}],
            ValueError,
            "message 1 has role 'tool', expected 'user' or 'assistant': a history keeps only user messages",
        ),
        ([{"role": "user", "content": "Q1"}], ValueError, "the last message is a user message"),
    ],
)
def test_a_history_of_another_kind_is_refused_by_name_before_the_model_is_asked(history, error, message):
    agent, backend = make_agent(["never"])
    with pytest.raises(error) as info:
        agent.run("Q", history=history)
    assert message in str(info.value)
    assert backend.requests == []


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": "other", "version": 1, "messages": []}, "not an agentkit conversation"),
        (
            {"format": "agentkit.conversation", "version": 2, "messages": []},
            "unsupported conversation version 2",
        ),
        # was "unsupported conversation version '1' (this agentkit reads 1)"
        (
            {"format": "agentkit.conversation", "version": "1", "messages": []},
            r"^conversation version must be the number 1, got the string '1'$",
        ),
        ({"format": "agentkit.conversation", "version": 1, "messages": {}}, "messages must be a list"),
        (
            {
                "format": "agentkit.conversation",
                "version": 1,
                "messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
            },
            "message 0 has role 'assistant', expected 'user'",
        ),
        (
            {
                "format": "agentkit.conversation",
                "version": 1,
                "messages": [
                    {"role": "user", "content": "x", "thinking": "t"},
                    {"role": "assistant", "content": "y"},
                ],
            },
            "message 0 must have exactly the keys 'role' and 'content'",
        ),
        (
            {"format": "agentkit.conversation", "version": 1, "messages": [{"role": "user", "content": "x"}]},
            "last message is a user message without a final answer",
        ),
        (
            {"format": "agentkit.conversation", "version": 1, "messages": [], "extra": 1},
            "^unknown conversation key 'extra'$",
        ),
        # a misspelt 'messages' was reported as "conversation messages must be a list", naming no key
        (
            {"format": "agentkit.conversation", "version": 1, "mesages": []},
            "^unknown conversation key 'mesages'$",
        ),
        ({"format": "agentkit.conversation", "version": 1}, "^missing conversation key 'messages'$"),
        # a part's own check named no message nor part (was: "vision budget 999 is not supported: ...")
        (
            {
                "format": "agentkit.conversation",
                "version": 1,
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "y"},
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "a"}, {**IMAGE, "vision_budget": 999}],
                    },
                    {"role": "assistant", "content": "z"},
                ],
            },
            r"^message 2 part 1: vision_budget: vision budget 999 is not supported: use one of 70, 140",
        ),
    ],
)
def test_invalid_conversations_are_rejected_clearly(data, message):
    with pytest.raises(ValueError, match=message):
        Conversation.from_json(json.dumps(data))


def test_not_json():
    with pytest.raises(ValueError, match="conversation is not valid JSON"):
        Conversation.from_json("{nope")


def test_json_nested_past_the_recursion_limit_is_a_value_error(tmp_path):
    """`agentkit chat --load` of such a file ended with json's RecursionError traceback."""
    deep = '[{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}]"
    (tmp_path / "deep.json").write_text(deep)
    with pytest.raises(
        ValueError, match=r"deep.json: conversation is not valid JSON: maximum recursion depth"
    ):
        Conversation.load(tmp_path / "deep.json")


def test_save_writes_lone_surrogates_as_escapes_and_loads_them_back(tmp_path):
    from agentkit.history import Conversation

    conv = Conversation().with_turn("open caf\udce9.txt", "done with \ud800 inside")
    p = tmp_path / "c.json"
    conv.save(p)
    p.read_bytes().decode("utf-8")  # valid UTF-8
    back = Conversation.load(p)
    assert back.messages == conv.messages


def test_a_file_saved_before_the_typed_models_loads_and_saves_back_byte_for_byte(tmp_path):
    # tests/data/conversation_v1_6d17d1d.json was written by Conversation.save at commit 6d17d1d (hand-written
    # to_dict/from_dict); the Pydantic models of agentkit.history read it and write the same bytes.
    from pathlib import Path

    from agentkit.history import SavedConversation

    src = Path(__file__).parent / "data" / "conversation_v1_6d17d1d.json"
    conv = Conversation.load(src)
    assert conv.turns == 2 and conv.metadata == {"user": "ada", "n": 3}
    assert conv.messages[0]["content"] == "Where is load_bundle defined? café ☕"
    assert conv.messages[2]["content"][0]["vision_budget"] == 280
    SavedConversation.model_validate_json(src.read_text(encoding="utf-8"))
    out = tmp_path / "again.json"
    conv.save(out)
    assert out.read_bytes() == src.read_bytes()


def test_a_save_that_fails_leaves_the_earlier_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    import os

    p = tmp_path / "c.json"
    Conversation().with_turn("first", "one").save(p)
    before = p.read_bytes()

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        Conversation().with_turn("first", "one").with_turn("second", "two").save(p)
    assert p.read_bytes() == before  # a plain write would have truncated it first
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.json"]


def test_save_through_a_symlink_writes_the_linked_file(tmp_path):
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real)
    Conversation().with_turn("q", "a").save(link)
    assert link.is_symlink() and Conversation.load(real).turns == 1


def test_save_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    p = tmp_path / "c.json"
    Conversation().with_turn("q", "a").save(p)
    p.chmod(0o600)
    Conversation().with_turn("q", "a").with_turn("q2", "a2").save(p)
    assert p.stat().st_mode & 0o777 == 0o600 and Conversation.load(p).turns == 2


@pytest.mark.parametrize("where", ["", ".", "dir"])
def test_save_to_a_directory_is_an_is_a_directory_error_naming_it(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError, match=f"Is a directory: '{where}'"):
        Conversation().with_turn("q", "a").save(where)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


def test_turns_sent_while_another_runs_are_all_kept():
    # two asend at once: each starts from the history as it was sent, and both turns stay in the history
    # (before, the turn that finished last replaced the history, and the other turn was lost)
    release = asyncio.Event()

    @tool
    async def wait(tag: str) -> str:
        """Waits for the test."""
        if tag == "first":
            await release.wait()  # finishes after the second turn
        else:
            release.set()
        return tag

    def script(messages, tools, tool_choice):
        last = messages[-1]
        if last["role"] == "user":
            return call("wait", tag=last["content"])
        return answer(f"{last['content']} done; history {len(messages) - 3} message(s)")

    session = Agent(ScriptedBackend(script), [wait]).chat(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )

    async def main():
        await asyncio.gather(session.asend("first"), session.asend("second"))

    asyncio.run(main())
    assert [m["content"] for m in session.conversation.messages] == [
        "hi",
        "hello",
        "second",
        "second done; history 2 message(s)",
        "first",
        "first done; history 2 message(s)",
    ]
    assert [r.question for r in session.results] == ["second", "first"]


def test_the_sync_calls_inside_an_event_loop_name_their_async_twin():
    agent, _backend = make_agent(["A1", "A2"])
    chat = agent.chat()

    async def inside() -> list[str]:
        said = []
        for sync_call in (agent.run, chat.send):
            with pytest.raises(RuntimeError) as info:
                sync_call("Q")
            said.append(str(info.value))
        said.append((await chat.asend("Q")).answer)
        return said

    assert asyncio.run(inside()) == [
        "Agent.run() cannot be called from a running event loop; use `await agent.arun(...)`",
        "ChatSession.send() cannot be called from a running event loop; use `await chat.asend(...)`",
        "A1",
    ]


def test_an_unknown_run_keyword_is_named_with_the_call_and_what_it_takes():
    agent, backend = make_agent(["A1"])
    takes = "(it takes deps, history, images, on_event, vision_budget)"
    with pytest.raises(TypeError) as info:
        agent.run("Q", histroy=[])
    assert str(info.value) == f"Agent.run() got an unexpected keyword argument 'histroy' {takes}"
    with pytest.raises(TypeError) as info:
        agent.iter("Q", dep=1)
    assert str(info.value) == f"Agent.iter() got an unexpected keyword argument 'dep' {takes}"
    assert backend.requests == []


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"when": object()}, "Object of type object is not JSON serializable"),
        ({"score": float("nan")}, "Out of range float values are not JSON compliant"),
    ],
)
def test_metadata_that_cannot_be_saved_is_refused_when_the_conversation_is_made(metadata, message):
    with pytest.raises(ValueError) as info:
        Conversation([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], metadata)
    assert (
        str(info.value)
        == f"Conversation: metadata must be JSON data (it is saved with the messages): {message}"
    )
    with pytest.raises(ValueError, match="metadata must be a dict, got list"):
        Conversation([], [1])  # type: ignore[arg-type]


def test_a_bare_list_of_messages_loads_as_history_takes_it(tmp_path):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    path = tmp_path / "list.json"
    path.write_text(json.dumps(messages))
    conv = Conversation.load(path)
    assert conv.messages == messages and conv.metadata == {}
    path.write_text(json.dumps([*messages, {"role": "tool", "content": "x"}]))
    with pytest.raises(ValueError, match=r"list.json: message 2 has role 'tool'"):
        Conversation.load(path)
    with pytest.raises(
        ValueError, match=r"a conversation is a JSON object \(or a list of its messages\), got str"
    ):
        Conversation.from_json('"hi"')


def test_reset_forgets_the_messages_and_keeps_the_metadata():
    agent, _ = make_agent([answer("A1"), answer("A2")])
    session = agent.chat(Conversation([], {"user_id": 7}))
    session.send("Q1")
    session.reset()
    assert session.conversation.messages == [] and session.conversation.metadata == {"user_id": 7}
    session.send("Q2")
    assert session.conversation.to_dict()["metadata"] == {"user_id": 7}
    assert [m["content"] for m in session.conversation.messages] == ["Q2", "A2"]
