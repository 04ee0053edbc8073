"""Binders (model.binding): a binder proposes candidates after the prefill; the constraint narrows those
parameters and nothing else; the model decides the rest."""

from __future__ import annotations

import datetime
import functools
import json

import pytest
import torch

from model.binding import (
    BindingInputs,
    CopyHeadBinder,
    Decision,
    label_request,
    pick,
    resolve_binder,
    scored_candidates,
    typed,
)
from model.binding.fit import DECLINE_FIT, name_fit, shares_a_word, words
from model.binding.labelling import Labelling, _word_span, token_pieces
from schema import normalize_tool

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather for a place.",
        "parameters": {
            "type": "object",
            "properties": {
                "place": {"type": "string", "description": "City name."},
                "units": {"type": "string", "enum": ["metric", "imperial"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["place"],
        },
    },
}
BOOK = {
    "type": "function",
    "function": {
        "name": "book_room",
        "description": "Book a meeting room.",
        "parameters": {
            "type": "object",
            "properties": {
                "day": {"type": "string", "format": "date"},
                "contact": {"type": "string", "format": "email"},
                "room": {"type": "string", "pattern": "^[A-Z][0-9]{3}$"},
                "sizes": {"type": "array", "items": {"type": "integer", "maximum": 100}},
            },
            "required": ["day"],
        },
    },
}


@functools.lru_cache(maxsize=1)
def _shipped():
    from model.turn.chat import ChatModel

    return ChatModel.load(None)


def _ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


# ------------------------------------------------------------------------------------------ typed values


def test_dates_are_read_by_dateparser_in_iso_form_and_relative_spans_are_no_date():
    req = "Book it for March 10th, 2025 or on 2025-04-01, for 3 days"
    assert [v for v, _, _ in typed.dated(req)] == ["2025-03-10", "2025-04-01"]
    assert next(req[a:b] for a, b in typed.date_spans(req)).startswith("March 10th")
    assert typed.dated("Hello, how are you?") == []
    # search_dates stops after the first date of this list; the rest of the request is searched again
    listed = "Plan visits for June 3, 2025, July 9, 2025 and 2025-08-01"
    assert [v for v, _, _ in typed.dated(listed)] == ["2025-06-03", "2025-07-09", "2025-08-01"]


def _numbers_of(text: str) -> list[str]:
    """The numbers a labelling of ``text`` alone reads (one token per character; no tagger needed)."""
    n = len(text)
    return [t for t, _ in Labelling(text, list(range(1, n + 1)), (0, n), [], torch.zeros(n, 1)).numbers()]


def test_a_hyphen_between_digits_is_no_minus_sign():
    assert _numbers_of("Show lines 172-229 of a.py") == ["172", "229"]  # a range: two numbers, no -229
    assert _numbers_of("at -3 degrees, (-5) or 1e-9") == ["-3", "-5", "1e-9"]
    assert _numbers_of("model x2, covid-19 and 70kg") == ["70"]  # inside a word: no number


def test_spelled_numbers_come_from_text2num_and_digits_are_not_repeated():
    assert typed.spelled_numbers("the next three days for twenty five people") == ["3", "25"]
    assert typed.spelled_numbers("for 3 days") == []


def test_named_options_and_shaped_strings_follow_the_schema_only():
    units = WEATHER["function"]["parameters"]["properties"]["units"]
    assert typed.named_options(units, "Berlin in Metric units please") == ["metric"]
    assert typed.named_options(units, "Berlin please") == []
    props = BOOK["function"]["parameters"]["properties"]
    assert typed.shaped_strings(props["contact"], "mail ana@example.org and bo@x.io") == [
        "ana@example.org",
        "bo@x.io",
    ]
    assert typed.shaped_strings(props["room"], "room B204, or b205 or C12") == ["B204"]
    assert typed.shaped_strings(props["day"], "on 12 May 2026") == []  # dates: typed.dated
    assert [v for v, _, _ in typed.dated("on 12 May 2026")] == ["2026-05-12"]
    assert typed.item_type(props["sizes"]) == "integer"
    assert typed.item_type(props["day"]) is None
    assert typed.item_type({"type": "array", "items": {"type": "string"}}) == "string"
    assert typed.written_list("pasta, chicken soup and bread") == ["pasta", "chicken soup", "bread"]
    assert typed.written_list("Oslo and Bergen") == ["Oslo", "Bergen"] and typed.written_list("Oslo") == [
        "Oslo"
    ]


def test_a_nullable_any_of_is_read_as_its_other_branch():
    nullable = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None}
    assert typed.non_null(nullable) == {"default": None, "type": "integer", "minimum": 1}
    assert typed.base_type(nullable) == "integer"
    assert typed.base_type({"oneOf": [{"type": "null"}, {"type": "string", "format": "date"}]}) == "string"
    either = {"anyOf": [{"type": "integer"}, {"type": "string"}]}  # not a nullable form: left as it is
    assert typed.non_null(either) is either and typed.base_type(either) is None


# ------------------------------------------------------------------------------------------ the decision


def test_a_decision_narrows_proposed_parameters_and_removes_nothing():
    specs = [normalize_tool(WEATHER), normalize_tool(BOOK)]
    decision = Decision(
        {("get_current_weather", "place"): ("Oslo", "Bergen"), ("book_room", "room"): ("B204",)}
    )
    out = decision.apply(specs)
    assert [s.name for s in out] == ["get_current_weather", "book_room"]  # no tool removed
    place = out[0].parameters["properties"]["place"]
    assert place["enum"] == ["Oslo", "Bergen"] and place["type"] == "string"
    assert set(out[0].parameters["properties"]) == {"place", "units", "days"}  # optional ones kept
    assert out[0].parameters["required"] == ["place"]  # nothing newly required
    room = out[1].parameters["properties"]["room"]
    assert room["enum"] == ["B204"] and "pattern" not in room
    assert Decision({}).apply(specs)[0] is specs[0]
    nullable = {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": nullable}}},
    }
    (narrowed,) = Decision({("f", "n"): (3, 4)}).apply([normalize_tool(tool)])
    assert narrowed.parameters["properties"]["n"] == {"default": None, "enum": [3, 4]}


def test_resolve_binder_takes_names_and_objects_and_refuses_the_rest():
    assert resolve_binder(None) is None and resolve_binder("none") is None
    assert isinstance(resolve_binder("copy-head"), CopyHeadBinder)
    mine = CopyHeadBinder(thresholds={"string": 0.5})
    assert resolve_binder(mine) is mine
    with pytest.raises(ValueError, match="binder must be one of"):
        resolve_binder("rules")


# ------------------------------------------------------------------------------------------ the tagger


@pytest.mark.parametrize(
    ("request_text", "piece", "value"),
    [
        ("Route from Santa Rosa to Palm Springs", "Palm", "Palm Springs"),
        ("Open C:/work/notes.txt now", "/work", "C:/work/notes.txt"),
        ("Find the class 'Token Store' here", "Token", "Token Store"),
        ("Trains from Lyon, Dijon and Metz", "Dijon", "Dijon"),  # never past a comma
        ("Oslo weather, please", "Oslo", "Oslo"),  # the request's first word starts no name
    ],
)
def test_a_run_widens_to_whole_words_and_names(request_text, piece, value):
    start = request_text.index(piece)
    assert _word_span(request_text, start, start + len(piece), 0, len(request_text)) == value


def test_token_pieces_keep_characters_split_over_byte_tokens_whole():
    tok = _shipped().tokenizer
    for text in ["¿Dónde está load_bundle?", "Wetter in München"]:
        ids = tok.encode(text, add_special_tokens=False)
        pieces = token_pieces(tok, ids)
        assert len(pieces) == len(ids) and "".join(pieces) == text


def test_shipped_tagger_proposes_the_place_and_the_request_numbers():
    cm = _shipped()
    msgs = _ask("What is the weather in Edinburgh for the next 3 days in metric?")
    ids = cm.encode(msgs, [WEATHER])
    lab = label_request(cm.model, cm.tokenizer, ids, [WEATHER])
    scored = scored_candidates(lab, [normalize_tool(WEATHER)])
    assert scored[("get_current_weather", "place")][0][0] == "Edinburgh"
    assert [v for v, _ in scored[("get_current_weather", "days")]] == [3]
    assert [v for v, _ in scored[("get_current_weather", "units")]] == ["metric"]
    assert all(0.0 <= c <= 1.0 for s in scored.values() for _, c in s)


def _event_tool(start: dict, until: dict) -> dict:
    props = {"title": {"type": "string"}, "start": start, "until": until}
    return {
        "type": "function",
        "function": {"name": "add_event", "parameters": {"type": "object", "properties": props}},
    }


def test_nullable_parameters_and_unread_formats_get_candidates_by_their_type():
    cm = _shipped()
    msgs = _ask("Add an event called Standup starting at noon, until day 12")
    plain = _event_tool({"type": "string"}, {"type": "integer", "minimum": 1})
    typed_tool = _event_tool(
        {"type": "string", "format": "time"}, {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
    )
    got = {}
    for tool in (plain, typed_tool):
        lab = label_request(cm.model, cm.tokenizer, cm.encode(msgs, [tool]), [tool])
        got[id(tool)] = scored_candidates(lab, [normalize_tool(tool)])
    # a format the binder does not read (time) takes those of the tagger's spans the format accepts (none of
    # "noon", "Standup"...: a time is 12:00:00Z to the grammar); a nullable integer takes the request's numbers
    assert [v for v, _ in got[id(typed_tool)][("add_event", "until")]] == [12]
    starts = [[v for v, _ in got[id(t)].get(("add_event", "start"), [])] for t in (typed_tool, plain)]
    assert starts[1] and starts[0] == []


def test_candidates_are_held_to_the_formats_the_grammar_writes():
    time, date_time = {"type": "string", "format": "time"}, {"type": "string", "format": "date-time"}
    assert not typed.accepts(time, "10:30") and typed.accepts(time, "10:30:00Z")
    assert not typed.accepts(date_time, "2024-05-06T00:00:00")  # no offset: not RFC 3339
    assert typed.accepts({"type": "array", "items": time}, ["10:30:00+01:00"])
    assert not typed.accepts({"type": "array", "items": time}, ["noon"])


def test_a_bound_time_parameter_still_gets_a_call_that_validates():
    # the binder's span "10:30" (or "called Standup") narrowed `start` to an enum without its format, so the
    # grammar wrote it and the call failed validation: "start: '10:30' is not a 'time'"
    from agentkit import Agent, tool
    from agentkit.backends.embedded import EmbeddedBackend

    @tool
    def add_event(title: str, start: datetime.time) -> str:
        """Add a calendar event.

        Args:
            title: Event title.
            start: Start time.
        """
        return f"added at {start.isoformat()}"

    backend = EmbeddedBackend(chat_model=_shipped(), seed=0, binding="copy-head")
    for request in ("Add an event called Standup starting at 10:30", "Add an event called Standup at noon"):
        agent = Agent(backend, tools=[add_event], tool_choice={"name": "add_event"}, max_steps=2)
        record = agent.run(request).tool_calls[0]
        assert record.content.startswith("added at "), (request, record.content)


class _Runs:
    """A stand-in labelling with given tagger spans (all a string array's candidates read)."""

    def __init__(self, spans: dict) -> None:
        self.runs = spans


def test_an_array_of_strings_takes_the_tagger_spans_read_as_lists():
    items = {"type": "array", "items": {"type": "string"}, "minItems": 2}
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"xs": items}}},
    }
    specs, key = [normalize_tool(tool)], ("f", "xs")
    one = _Runs({key: {"pasta, chicken soup and bread": 0.9}})
    assert scored_candidates(one, specs) == {key: [(["pasta", "chicken soup", "bread"], 0.9)]}
    several = _Runs({key: {"Oslo": 0.9, "Bergen": 0.6, "and": 0.4}})  # each alone is too short (minItems)
    assert scored_candidates(several, specs) == {key: [(["Oslo", "Bergen"], 0.4)]}
    assert scored_candidates(_Runs({}), specs) == {}


def test_a_model_without_copy_head_gets_no_decision():
    class Plain:
        pass

    inputs = BindingInputs(Plain(), None, [1, 2, 3], [WEATHER], [normalize_tool(WEATHER)])
    assert CopyHeadBinder().propose(inputs) is None


def test_the_threshold_decides_between_forcing_one_value_and_offering_several():
    cm = _shipped()
    msgs = _ask("Weather for Oslo or Bergen for 2 or 5 days")
    ids = cm.encode(msgs, [WEATHER])
    inputs = BindingInputs(cm.model, cm.tokenizer, ids, [WEATHER], [normalize_tool(WEATHER)])
    free = CopyHeadBinder(thresholds={}).propose(inputs)  # nothing is sure enough to force
    assert free is not None and sorted(free.candidates[("get_current_weather", "days")]) == [2, 5]
    everything = dict.fromkeys(("string", "number"), 0.0)  # everything is, and any lower runner-up will do
    sure = CopyHeadBinder(thresholds=everything).propose(inputs)
    assert sure is not None and all(len(v) == 1 for v in sure.candidates.values())


def test_one_value_is_forced_only_when_no_other_ties_with_it():
    assert pick([("a", 0.9), ("b", 0.5)], bar=0.8) == ("a",)  # any lower runner-up
    assert pick([("a", 1.0), ("b", 1.0)], bar=0.8) == ("a", "b")  # a tie is offered, not forced
    close = [("a", 0.7), ("b", 0.5), ("c", 0.3), ("d", 0.2)]
    assert pick(close, bar=0.8) == ("a", "b", "c")  # below the threshold: the best three offered
    assert pick([("a", 0.99)], bar=None) == () and pick([("a", 0.7)], bar=0.8) == ()  # one unsure value: free
    assert pick([("a", 0.99)], bar=0.8) == ("a",)
    assert pick([("a", 0.07)], bar=0.8, lone=True) == ("a",) == pick([("a", 0.07)], bar=None, lone=True)
    assert pick([("a", 0.07), ("b", 0.05)], bar=0.8, lone=True) == ("a", "b")  # lone: the only one


def test_a_string_parameters_only_candidate_is_forced_however_unsure_the_tagger_is():
    cm = _shipped()
    ids = cm.encode(_ask("What's the weather in Oslo in imperial units?"), [WEATHER])
    inputs = BindingInputs(cm.model, cm.tokenizer, ids, [WEATHER], [normalize_tool(WEATHER)])
    labelling = label_request(cm.model, cm.tokenizer, ids, [WEATHER])
    units = ("get_current_weather", "units")
    [(value, confidence)] = scored_candidates(labelling, [normalize_tool(WEATHER)])[units]
    assert value == "imperial" and confidence < 0.8  # the enum option named, the tagger unsure of it
    decision = CopyHeadBinder().propose(inputs)
    assert decision is not None and decision.candidates[units] == ("imperial",)
    kept_free = CopyHeadBinder(lone=()).propose(inputs)  # the rule before issue #40's lone-candidate change
    assert kept_free is not None and units not in kept_free.candidates


# ------------------------------------------------------------------------------------------ the turn


def test_one_encoder_pass_per_prompt_with_a_binder_on():
    cm = _shipped()
    msgs = _ask("What's the weather like in Reykjavik right now?")
    prompts: list[int] = []

    def count(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] > cm.settings.canvas_length:
            prompts.append(int(ids.shape[1]))  # the prompt, not a committed canvas

    hook = cm.model.model.encoder.register_forward_pre_hook(count, with_kwargs=True)
    try:
        out = cm.chat(msgs, [WEATHER], seed=0, binder="copy-head")
        with_binder = list(prompts)
        prompts.clear()
        cm.chat(msgs, [WEATHER], seed=0, binder=None)
    finally:
        hook.remove()
    assert with_binder == prompts == [len(cm.encode(msgs, [WEATHER]))]
    assert [c.arguments.get("place") for c in out.tool_calls] == ["Reykjavik"]


def test_a_prefill_given_to_generate_is_token_identical_to_its_own():
    from model.runtime import generate
    from model.turn.prefill import prefill_prompt

    cm = _shipped()
    ids = torch.tensor([cm.encode(_ask("Where is the function load_bundle defined?"), [WEATHER])])
    own = generate(cm.model, ids, cm.settings, seed=3)
    given = generate(cm.model, ids, cm.settings, seed=3, prefill=prefill_prompt(cm.model, ids))
    assert torch.equal(own.sequences, given.sequences)


def test_the_binder_changes_the_constraint_only_and_only_when_asked(monkeypatch):
    cm = _shipped()
    msgs = _ask("What's the weather like in Reykjavik right now?")
    seen = []
    real = cm.make_constraint

    def spy(tools, *args, **kwargs):
        seen.append(tools)
        return real(tools, *args, **kwargs)

    monkeypatch.setattr(cm, "make_constraint", spy)
    turn = cm.prepare(msgs, [WEATHER], binder="copy-head")
    assert turn.input_ids == cm.encode(msgs, [WEATHER])  # the model reads the declarations as given
    assert turn.prefill is not None
    place = seen[-1][0].parameters["properties"]["place"]
    assert "Reykjavik" in place["enum"]
    assert seen[-1][0].parameters["required"] == ["place"]
    cm.prepare(msgs, [WEATHER])  # no binder: the tools as given
    assert seen[-1] == [WEATHER]
    with pytest.raises(TypeError, match=r"unknown turn option\(s\) \['max_tokens'\]"):
        cm.chat(msgs, [WEATHER], max_tokens=5)


def test_decoding_file_refuses_a_non_boolean_bind_values(tmp_path):
    from model.checkpoint.loading import read_decoding_file
    from model.errors import CheckpointError

    p = tmp_path / "agentkit_decoding.json"
    p.write_text(json.dumps({"bind_values": "yes"}))
    with pytest.raises(CheckpointError, match='bind_values: input should be a valid boolean, got "yes"'):
        read_decoding_file(p)


def test_a_turn_keeps_one_of_identical_calls_and_every_different_one():
    from grammar.parse import format_tool_call
    from model.checkpoint.tokenizer import encode_marked
    from model.runtime import GenerationStats

    cm = _shipped()
    a = format_tool_call("get_current_weather", {"place": "Oslo"})
    b = format_tool_call("get_current_weather", {"place": "Bergen"})
    tokens = encode_marked(cm.tokenizer, a + a + b + a)
    out = cm.finish(tokens, 10, GenerationStats(), 0.0)
    assert [c.arguments["place"] for c in out.tool_calls] == ["Oslo", "Bergen"]


# ------------------------------------------------------------------------------------------ declining

PRODUCTS = {
    "type": "function",
    "function": {
        "name": "search_products",
        "description": "Search the shop's catalogue.",
        "parameters": {
            "type": "object",
            "properties": {"category": {"type": "string"}, "max_price": {"type": "number"}},
            "required": ["category"],
        },
    },
}


def test_words_split_names_and_function_words_are_never_shared():
    assert words("Where is the getWeather_tool defined?") == [
        "where",
        "is",
        "the",
        "get",
        "weather",
        "tool",
        "defined",
    ]
    tool = normalize_tool({"name": "get_the_time", "description": "Tell what time it is where you are."})
    assert not shares_a_word("Where are you? Tell me!", [tool])
    assert shares_a_word("What time?", [tool])


def test_a_shared_word_or_its_first_five_letters_is_a_sign_of_fit():
    specs = [normalize_tool(WEATHER)]
    assert shares_a_word("Which city is warmest?", specs)  # a parameter's description
    assert shares_a_word("Use imperial", specs)  # an enum option
    assert shares_a_word("How many days?", specs)  # a parameter's name
    assert shares_a_word("Any weathery news?", specs)
    assert not shares_a_word("Hello, how are you?", specs)
    assert not shares_a_word("Where is the function load_bundle defined?", [normalize_tool(PRODUCTS)])


def test_name_fit_reads_a_word_after_the_verb_or_the_spelling():
    assert name_fit("find_current_weather", ["get_current_weather"]) == 1.0
    assert name_fit("get_weather", ["geo.get_weather"]) == 1.0
    assert name_fit("find_definition", ["search_products"]) < DECLINE_FIT
    assert name_fit("", []) == 0.0


POGODA = {
    "type": "function",
    "function": {
        "name": "pogoda",
        "description": "Текущая погода в городе.",
        "parameters": {
            "type": "object",
            "properties": {"gorod": {"type": "string", "description": "Название города."}},
            "required": ["gorod"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


def test_words_of_any_script_are_shared_so_a_russian_fit_request_keeps_its_call():
    assert words("Какая погода в Москве? Température") == ["какая", "погода", "в", "москве", "température"]
    assert shares_a_word("Какая погода в Москве?", [normalize_tool(POGODA)])
    out = _shipped().chat(_ask("Какая погода в Москве?"), [POGODA], seed=0, binder="copy-head")
    assert [c.name for c in out.tool_calls] == ["pogoda"]  # declined when only a-z letters made words


def test_a_tool_without_a_description_is_never_declined_against():
    cm = _shipped()
    for request in ("python tutorials", "headphones under 50 dollars"):  # drafted: find_s, find_er
        out = cm.chat(_ask(request), [SEARCH], seed=0, binder="copy-head")
        assert [c.name for c in out.tool_calls] == ["search"], request
    described = {**SEARCH, "function": {**SEARCH["function"], "description": "Search the web."}}
    assert cm.chat(_ask("thanks"), [described], seed=0, binder="copy-head").tool_calls == []


def test_descriptions_are_read_as_rendered_not_from_an_agents_specs(monkeypatch):
    import model.binding.fit as fit
    from agentkit import Agent, tool
    from agentkit.backends.embedded import EmbeddedBackend
    from model.turn.prefill import Prefill, prefill_prompt

    cm = _shipped()

    @tool
    def search_products(category: str) -> str:
        """Search the shop's catalogue.

        Args:
            category: Product category.
        """
        return "[]"

    agent = Agent(EmbeddedBackend(chat_model=cm, seed=0), tools=[search_products], max_steps=1)
    run = agent.run("Where is the function load_bundle defined?")
    assert run.tool_calls == []  # an agent declines too (its specs have no descriptions)

    monkeypatch.setattr(Prefill, "draft", lambda self, m, t, opening, until: "find_def")
    bare = normalize_tool({"name": "search_products", "parameters": PRODUCTS["function"]["parameters"]})
    assert not bare.description  # as an agent's embedded backend keeps it
    for request, declined in (
        ("Where is the function load_bundle defined?", True),
        ("Anything in the catalogue for hiking?", False),  # shares a word with the description only
    ):
        ids = cm.encode(_ask(request), [PRODUCTS])
        pf = prefill_prompt(cm.model, torch.tensor([ids]))
        inputs = BindingInputs(
            cm.model, cm.tokenizer, ids, [PRODUCTS], [bare], "auto", pf.hidden, None, pf, True
        )
        assert fit.no_tool_fits(inputs, request) is declined, request


def test_a_request_no_offered_tool_fits_is_declined_under_auto_only():
    cm = _shipped()
    msgs = _ask("Where is the function load_bundle defined?")
    alone = cm.chat(msgs, [PRODUCTS], seed=0, binder=None)
    assert [c.name for c in alone.tool_calls] == ["search_products"]  # the checkpoint alone calls
    declined = cm.chat(msgs, [PRODUCTS], seed=0, binder="copy-head")
    assert declined.tool_calls == [] and declined.text.strip()
    required = cm.chat(msgs, [PRODUCTS], seed=0, binder="copy-head", tool_choice="required")
    assert [c.name for c in required.tool_calls] == ["search_products"]
    kept = cm.chat(msgs, [PRODUCTS], seed=0, binder=CopyHeadBinder(decline=False))
    assert [c.name for c in kept.tool_calls] == ["search_products"]


def test_a_fit_request_sharing_no_word_keeps_its_call_and_the_draft_leaves_the_cache_as_it_was():
    cm = _shipped()
    msgs = _ask("How cold is it in Dubai right now?")
    assert not shares_a_word(msgs[0]["content"], [normalize_tool(WEATHER)])  # so the name is drafted
    checked = cm.chat(msgs, [WEATHER], seed=0, binder="copy-head")
    unchecked = cm.chat(msgs, [WEATHER], seed=0, binder=CopyHeadBinder(decline=False))
    assert [c.arguments for c in checked.tool_calls] == [{"place": "Dubai"}]
    assert checked.raw == unchecked.raw


def test_only_a_turn_right_after_the_users_message_under_auto_is_checked(monkeypatch):
    import dataclasses

    import model.binding.binder as binder_module
    import model.binding.fit as fit
    from model.turn.prefill import Prefill, prefill_prompt

    drafted: list[str] = []
    monkeypatch.setattr(
        Prefill, "draft", lambda self, m, t, opening, until: drafted.append(opening) or "find_def"
    )
    cm = _shipped()
    msgs = _ask("Where is the function load_bundle defined?")
    ids = cm.encode(msgs, [PRODUCTS])
    pf = prefill_prompt(cm.model, torch.tensor([ids]))
    spec = normalize_tool(PRODUCTS)
    base = BindingInputs(cm.model, cm.tokenizer, ids, [PRODUCTS], [spec], "auto", pf.hidden, None, pf, True)
    assert fit.no_tool_fits(base, msgs[0]["content"])
    assert drafted == ["<|tool_call>call:"]
    for change in (
        {"request_turn": False},
        {"tool_choice": "required"},
        {"syntax": "json"},
        {"prefill": None},
    ):
        assert not fit.no_tool_fits(dataclasses.replace(base, **change), msgs[0]["content"]), change
    assert drafted == ["<|tool_call>call:"]

    seen: list[bool] = []
    monkeypatch.setattr(
        binder_module, "no_tool_fits", lambda inputs, request: seen.append(inputs.request_turn)
    )
    call = {"id": "c1", "type": "function", "function": {"name": "search_products", "arguments": "{}"}}
    after = [
        *msgs,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "[]"},
    ]
    cm.prepare(msgs, [PRODUCTS], binder="copy-head")
    cm.prepare(after, [PRODUCTS], binder="copy-head")
    assert seen == [True, False]


def test_date_and_date_time_parameters_get_only_values_their_format_accepts():
    # a date is read from the request; a date-time is not (a request's date carries no UTC offset): it takes the
    # tagger's spans the format accepts, here none
    cm = _shipped()
    msgs = _ask("Add an event called Standup on May 6 2024 at 10:30")
    tool = _event_tool({"type": "string", "format": "date-time"}, {"type": "string", "format": "date"})
    lab = label_request(cm.model, cm.tokenizer, cm.encode(msgs, [tool]), [tool])
    got = scored_candidates(lab, [normalize_tool(tool)])
    assert [v for v, _ in got[("add_event", "until")]] == ["2024-05-06"]
    assert got.get(("add_event", "start"), []) == []
