"""Bound values (model.binding): the copy head's binding classifier fixes the request words of bound parameters
in the turn's constraint."""

from __future__ import annotations

import functools
import itertools
import json

import pytest
import torch

from model.binding import (
    Labelling,
    assign_numbers,
    binding_runs,
    bound_spans,
    named_flags,
    number_arrays,
    one_string,
    pin_bound_values,
    single_call,
    typed_runs,
)
from model.binding.labelling import _word_span
from model.binding.rules import _first_of_pair
from model.constraints.schema import normalize_tool

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
            },
            "required": ["place"],
        },
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read lines of a file.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "x-grounded": True, "maxLength": 40},
                "end_line": {"type": "integer", "minimum": 1},
                "ratio": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["path"],
        },
    },
}


def _spec(name, description, properties, required=()):
    """A normalised tool ``name`` whose parameters are the object of ``properties``, ``required`` listed."""
    parameters = {"type": "object", "properties": properties, "required": list(required)}
    return normalize_tool(
        {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
    )


def test_pin_fixes_strings_numbers_and_enums_that_their_schema_accepts():
    specs = [normalize_tool(WEATHER), normalize_tool(READ)]
    spans = {
        ("get_current_weather", "place"): "Edinburgh",
        ("get_current_weather", "units"): "in metric units",  # names one option of the enum
        ("read_file", "path"): "scripts/run.md",
        ("read_file", "end_line"): "473",
        ("read_file", "ratio"): "about half",  # not a number: left free
        ("read_file", "tags"): "a b",  # an array: left free
    }
    out, n = pin_bound_values(specs, spans)
    assert n == 4
    place = out[0].parameters["properties"]["place"]
    assert place["enum"] == ["Edinburgh"] and place["type"] == "string"
    assert out[0].parameters["properties"]["units"]["enum"] == ["metric"]
    path = out[1].parameters["properties"]["path"]
    assert path["enum"] == ["scripts/run.md"] and "x-grounded" not in path  # the span is of the conversation
    assert out[1].parameters["properties"]["end_line"]["enum"] == [473]
    assert "enum" not in out[1].parameters["properties"]["ratio"]
    assert out[1].parameters["properties"]["tags"] == specs[1].parameters["properties"]["tags"]
    # every bound parameter must be written
    assert out[0].parameters["required"] == ["place", "units"]
    assert out[1].parameters["required"] == ["path", "end_line", "ratio", "tags"]
    assert "x-grounded" in specs[1].parameters["properties"]["path"]  # the inputs are not modified
    assert specs[0].parameters["required"] == ["place"]


def test_pin_leaves_a_value_its_own_schema_refuses_but_still_requires_it():
    specs = [normalize_tool(READ)]
    out, n = pin_bound_values(specs, {("read_file", "path"): "x" * 41, ("read_file", "end_line"): "0"})
    assert n == 0
    props = out[0].parameters["properties"]
    assert props["path"] == specs[0].parameters["properties"]["path"]
    assert props["end_line"] == {"type": "integer", "minimum": 1}
    assert set(props) == {"path", "end_line"}  # ratio and tags: optional and unbound, left out
    assert out[0].parameters["required"] == ["path", "end_line"]


def test_pin_offers_the_iso_form_of_a_spoken_date_and_narrows_the_tools():
    specs = [normalize_tool(WEATHER), normalize_tool(READ)]
    out, n = pin_bound_values(specs, {("read_file", "path"): "December 16, 2022"})
    assert n == 1 and [s.name for s in out] == ["read_file"]  # get_current_weather has nothing bound
    assert out[0].parameters["properties"]["path"]["enum"] == ["2022-12-16", "December 16, 2022"]
    # a named tool_choice keeps its tool; nothing bound leaves every tool as it was
    named = {"type": "function", "function": {"name": "get_current_weather"}}
    out, _ = pin_bound_values(specs, {("read_file", "path"): "a.md"}, named)
    assert [s.name for s in out] == ["get_current_weather", "read_file"] and out[0] is specs[0]
    out, n = pin_bound_values(specs, {})
    assert n == 0 and all(a is b for a, b in zip(out, specs, strict=True))


def test_an_enum_text_that_names_no_option_or_two_is_left_to_the_model():
    specs = [normalize_tool(WEATHER)]
    for text in ("in Fahrenheit", "metric or imperial"):
        out, n = pin_bound_values(specs, {("get_current_weather", "units"): text})
        assert n == 0
        assert out[0].parameters["properties"]["units"] == specs[0].parameters["properties"]["units"]
        assert out[0].parameters["required"] == ["place", "units"]


def test_single_call_needs_a_binding_with_one_run_per_parameter():
    assert single_call(
        {("get_current_weather", "place"): ["Berlin"], ("get_current_weather", "units"): ["metric"]}
    )
    assert not single_call({("get_current_weather", "place"): ["Berlin", "Paris"]})  # a parallel request
    assert not single_call({})  # nothing bound: the model decides


def test_typed_runs_keep_the_numbers_of_number_parameters():
    specs = [normalize_tool(WEATHER), normalize_tool(READ)]
    runs = {
        ("read_file", "end_line"): ["greatest", "common", "40", "a=2", "-3", "2.5", "40"],
        ("read_file", "ratio"): ["about", "0.5"],
        ("read_file", "path"): ["notes", "a.md"],  # a string: every run kept
        ("get_current_weather", "units"): ["in metric units", "Fahrenheit"],  # an enum: kept
    }
    out = typed_runs(runs, specs)
    assert out[("read_file", "end_line")] == ["40", "2", "-3"]  # whole numbers, each once, in request order
    assert out[("read_file", "ratio")] == ["0.5"]
    assert out[("read_file", "path")] == ["notes", "a.md"]
    assert out[("get_current_weather", "units")] == ["in metric units", "Fahrenheit"]
    # a number parameter on one word keeps it (a mention: made required, the model writes the number);
    # on several words and no number it is left out, not a parallel request
    assert typed_runs({("read_file", "end_line"): ["tomorrow"]}, specs) == {
        ("read_file", "end_line"): ["tomorrow"]
    }
    assert typed_runs(
        {("read_file", "end_line"): ["two", "sides"], ("read_file", "path"): ["a.md"]}, specs
    ) == {("read_file", "path"): ["a.md"]}
    assert runs[("read_file", "ratio")] == ["about", "0.5"]  # the input is not modified


def _labelling(pieces, scores):
    """A Labelling over prompt tokens ``pieces`` (the first one outside the user message); ``scores`` maps
    (token index, READ's parameter) to a log-posterior, every other entry -9."""
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    keys = [("read_file", name, 0, 0) for name in ("path", "end_line", "ratio")]
    logp = torch.full((len(pieces), 1 + len(keys)), -9.0)
    for (i, name), value in scores.items():
        logp[i, 1 + [k[1] for k in keys].index(name)] = value
    return Labelling("".join(pieces), ends, (len(pieces[0]), total), keys, logp)


def test_assign_numbers_shares_the_request_numbers_out_one_to_one_by_posterior():
    pieces = ["<u>", "read", " 40", " lines", " at", " 2", ".", "5", " from", " x2"]
    lab = _labelling(
        pieces, {(2, "end_line"): -0.1, (2, "ratio"): -0.5, (7, "ratio"): -1.0, (5, "end_line"): 0.0}
    )
    assert lab.numbers() == [("40", [2]), ("2.5", [5, 6, 7])]  # "x2" is part of a word, not a number
    glued = _labelling(["<u>", " weighs", " 70", "kg", ",", " 1", ".", "75", "m", " tall"], {})
    assert glued.numbers() == [("70", [2]), ("1.75", [5, 6, 7])]  # a number before its unit starts a word
    specs = [normalize_tool(READ)]
    runs = {
        ("read_file", "end_line"): ["lines"],
        ("read_file", "ratio"): ["40", "2.5"],
        ("read_file", "path"): ["x2"],
    }
    out = assign_numbers(runs, specs, lab)
    # end_line scores highest on 2.5 but is an integer: it takes 40, so ratio takes 2.5 although it prefers 40
    assert out[("read_file", "end_line")] == ["40"]
    assert out[("read_file", "ratio")] == ["2.5"]
    assert out[("read_file", "path")] == ["x2"]  # a string parameter keeps its runs
    assert runs[("read_file", "ratio")] == ["40", "2.5"]  # the input is not modified
    # an optional number parameter the labels put on no word (end_line here) takes no number
    alone = assign_numbers({("read_file", "ratio"): ["2.5"]}, specs, lab)
    assert alone == {("read_file", "ratio"): ["40"]}
    # with one number and two parameters, the better-scored pair wins and the other parameter keeps its runs
    one = _labelling(["<u>", "read", " 40"], {(2, "end_line"): -2.0, (2, "ratio"): -0.2})
    out = assign_numbers({("read_file", "end_line"): ["read"], ("read_file", "ratio"): ["x"]}, specs, one)
    assert out == {("read_file", "end_line"): ["read"], ("read_file", "ratio"): ["40"]}


def test_assign_numbers_puts_a_number_the_request_names_first_then_required_parameters():
    named = _labelling(["<u>", "ratio", " of", " 3", " and", " 40"], {(3, "ratio"): -5.0, (5, "ratio"): -0.1})
    assert named.names("ratio", 0) and not named.names("ratio", 1) and not named.names("end_line", 0)
    specs = [normalize_tool(READ)]
    assert assign_numbers({("read_file", "ratio"): ["40"]}, specs, named) == {("read_file", "ratio"): ["3"]}
    # a required number parameter takes part unlabelled, and before an optional one: it takes the better number
    need = normalize_tool(
        {
            **READ,
            "function": {
                **READ["function"],
                "parameters": {**READ["function"]["parameters"], "required": ["path", "end_line"]},
            },
        }
    )
    lab = _labelling(
        ["<u>", "show", " 7", " and", " 9"],
        {(2, "ratio"): -0.1, (2, "end_line"): -3.0, (4, "end_line"): -4.0},
    )
    out = assign_numbers({("read_file", "ratio"): ["7"]}, [need], lab)
    assert out == {("read_file", "end_line"): ["7"], ("read_file", "ratio"): ["9"]}
    one_letter = _labelling(["<u>", "a", " 5", " b", "=", "6"], {})
    assert [one_letter.names("a", 0), one_letter.names("b", 1)] == [False, True]  # "a 5": an article, not a=5


TTEST = {
    "type": "function",
    "function": {
        "name": "t_test",
        "description": "Two-sample t-test.",
        "parameters": {
            "type": "object",
            "properties": {
                "dataset_A": {"type": "array", "items": {"type": "integer"}},
                "dataset_B": {"type": "array", "items": {"type": "integer"}},
                "alpha": {"type": "number", "description": "Significance level."},
            },
            "required": ["dataset_A", "dataset_B"],
        },
    },
}


def _text_labelling(text: str, tools: list[dict]) -> Labelling:
    """A Labelling of ``text`` (one character per token, the user message after a 3-character prefix) over the
    declared parameters of ``tools``, every log-posterior -9."""
    prompt = "<u>" + text
    keys = [
        (t["function"]["name"], n, 0, 0) for t in tools for n in t["function"]["parameters"]["properties"]
    ]
    logp = torch.full((len(prompt), 1 + len(keys)), -9.0)
    return Labelling(prompt, list(range(1, len(prompt) + 1)), (3, len(prompt)), keys, logp)


def test_number_arrays_gives_each_written_list_to_its_list_parameter_in_order():
    lab = _text_labelling("values 12, 24 and 36 and B [15,30,45] at 5%", [TTEST])
    assert lab.number_lists() == [[0, 1, 2], [3, 4, 5]]  # "5" stands alone, "] and B [" ends a list
    assert [lab.percent(j) for j in (2, 6)] == [False, True]
    spec = normalize_tool(TTEST)
    held = number_arrays([spec], lab)
    props = held.specs[0].parameters["properties"]
    assert props["dataset_A"]["enum"] == [[12, 24, 36]] and props["dataset_B"]["enum"] == [[15, 30, 45]]
    assert held.bound == {("t_test", "dataset_A"): "12, 24, 36", ("t_test", "dataset_B"): "15, 30, 45"}
    assert held.taken == {0, 1, 2, 3, 4, 5} and held.held == {
        ("t_test", "dataset_A"),
        ("t_test", "dataset_B"),
    }
    assert spec.parameters["properties"]["dataset_A"] == {"type": "array", "items": {"type": "integer"}}
    # alpha is named nowhere and optional: it takes no number; "5%" read as a fraction once it is named
    assert assign_numbers({}, held.specs, lab, held.taken) == {}
    rate = _text_labelling("values 12, 24 and 36 and B [15,30,45] alpha = 5%", [TTEST])
    assert assign_numbers({}, held.specs, rate, held.taken) == {("t_test", "alpha"): ["0.05"]}
    assert typed_runs({("t_test", "alpha"): ["12", "24"]}, held.specs, {"12", "24"}) == {}


def test_number_arrays_holds_other_lists_to_the_request_numbers_and_their_count():
    lab = _text_labelling("compare 3 with 4.5, 7", [TTEST])  # one written list for two parameters
    assert lab.number_lists() == [[1, 2]]
    held = number_arrays([normalize_tool(TTEST)], lab)
    a = held.specs[0].parameters["properties"]["dataset_A"]
    assert a["items"]["enum"] == [3, 7] and a["maxItems"] == 2 and "enum" not in a  # whole numbers only
    assert held.bound == {} and held.taken == set() and single_call({}, held.held)
    decimals = _text_labelling("compare [1.5, 2.25, 3] and [1, 2]", [TTEST])  # integer items: not that list
    fell_back = number_arrays([normalize_tool(TTEST)], decimals)
    assert fell_back.bound == {} and fell_back.specs[0].parameters["properties"]["dataset_A"]["items"][
        "enum"
    ] == [3, 1, 2]
    none = _text_labelling("compare the two groups", [TTEST])
    untouched = [normalize_tool(TTEST)]
    assert number_arrays(untouched, none).specs[0] is untouched[0]


def test_shipped_checkpoint_copies_the_lists_a_request_writes():
    out = _shipped().chat(
        _ask(
            "Find the statistical significance between dataset_A with the values 12, 24, 36 and dataset_B "
            "with the values 15, 30, 45."
        ),
        [TTEST],
        seed=0,
    )
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        ("t_test", {"dataset_A": [12, 24, 36], "dataset_B": [15, 30, 45]})
    ]


def test_bound_spans_of_a_model_without_copy_head_is_empty():
    class Plain:
        pass

    assert bound_spans(Plain(), None, [1, 2, 3], [WEATHER]) == {}


@functools.lru_cache(maxsize=1)
def _shipped():
    from model.chat import ChatModel

    return ChatModel.load(None)


def _ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_shipped_checkpoint_binds_the_place_of_a_weather_request():
    cm = _shipped()
    msgs = _ask("Quick task: get the current weather at Edinburgh")
    spans = bound_spans(cm.model, cm.tokenizer, cm.encode(msgs, [WEATHER, READ]), [WEATHER, READ])
    assert spans.get(("get_current_weather", "place")) == "Edinburgh"
    assert ("read_file", "path") not in spans
    runs = binding_runs(cm.model, cm.tokenizer, cm.encode(msgs, [WEATHER, READ]), [WEATHER, READ])
    assert runs[("get_current_weather", "place")] == ["Edinburgh"]
    assert single_call(runs)


def test_bind_values_fixes_the_call_value_in_the_constraint_only(monkeypatch):
    cm = _shipped()
    assert cm.settings.bind_values  # the shipped decoding file turns it on
    msgs = _ask("What's the weather like in Reykjavik right now?")
    seen = []
    real = cm.make_constraint

    def spy(tools, *args, **kwargs):
        seen.append(tools)
        return real(tools, *args, **kwargs)

    monkeypatch.setattr(cm, "make_constraint", spy)
    turn = cm.prepare(msgs, [WEATHER])
    assert turn.input_ids == cm.encode(msgs, [WEATHER])  # the model reads the declarations as given
    assert seen[-1][0].parameters["properties"]["place"]["enum"] == ["Reykjavik"]
    out = cm.chat(msgs, [WEATHER], tool_choice="required", seed=0)
    assert [(c.name, c.arguments.get("place")) for c in out.tool_calls] == [
        ("get_current_weather", "Reykjavik")
    ]
    monkeypatch.setattr(cm, "settings", cm.settings.replace(bind_values=False))
    cm.prepare(msgs, [WEATHER])
    assert seen[-1] == [WEATHER]  # off: the constraint gets the tools unchanged


def test_decoding_file_refuses_a_non_boolean_bind_values(tmp_path):
    from model.errors import CheckpointError
    from model.loading import read_decoding_file

    p = tmp_path / "agentkit_decoding.json"
    p.write_text(json.dumps({"bind_values": "yes"}))
    with pytest.raises(CheckpointError, match="bind_values must be true or false"):
        read_decoding_file(p)


@pytest.mark.parametrize(
    ("request_text", "piece", "value"),
    [
        ("Find the distance between New York City and Washington D.C.", "D", "Washington D.C."),
        ("Route from San Francisco to Los Angeles, avoiding tolls", "Los", "Los Angeles"),
        ("Growth in Yellowstone National Park for 5 years", "Yellowstone", "Yellowstone National Park"),
        ("Anyone born 01-01-1980 in California?", "-01", "01-01-1980"),
        ("Fit the data in C:/data/cars.csv.", "/data", "C:/data/cars.csv"),
        ("Students of 'Bluebird High School' from StudentDB", "Bluebird", "Bluebird High School"),
        ("Where is the function load_bundle defined?", "load_", "load_bundle"),
        ("The distance between Boston, MA, and Denver", "MA", "MA"),  # never past a comma
        ("Berlin weather, please", "Berlin", "Berlin"),  # the request's first word starts no name
        ("Show Gold prices", "Gold", "Gold"),  # nor joins one
        ("Is it cold in Oslo I wonder", "Oslo", "Oslo"),  # "I" is no part of a name
        ("How tall is Mr. X in cm", "Mr", "Mr"),
    ],
)
def test_a_run_widens_to_whole_words_and_capitalised_names(request_text, piece, value):
    at = request_text.index(piece)
    assert _word_span(request_text, at, at + len(piece), 0, len(request_text)) == value
    # a token's leading space belongs to no word: " Angeles" alone is "Angeles"'s name, not "to Los Angeles"
    space = request_text.index(" " + piece) if " " + piece in request_text else at
    assert _word_span(request_text, space, at + len(piece), 0, len(request_text)) == value


def test_typed_runs_drop_the_runs_of_a_string_that_only_name_the_tool():
    function = {"type": "string", "description": "The polynomial, such as x**2."}
    about = "Calculate the derivative of a polynomial function, e.g. x**2."
    specs = [_spec("calculate_derivative", about, {"function": function}, ["function"])]
    key = ("calculate_derivative", "function")
    assert typed_runs({key: ["derivative", "polynomial function", "3x^2"]}, specs) == {key: ["3x^2"]}
    # the description's examples are no words of the tool: "x**2" stays a value
    assert typed_runs({key: ["derivative", "x**2"]}, specs) == {key: ["x**2"]}
    # runs that all name the tool are kept (nothing else is left)
    assert typed_runs({key: ["derivative", "function"]}, specs) == {key: ["derivative", "function"]}


@pytest.mark.parametrize(
    ("request_text", "piece", "value"),
    [
        ("Details of the case titled 'Roe v. Wade'.Include dissent", "Wade", "Roe v. Wade"),
        ("Fetch the DNA molecule with id `DNA123`.", "DNA1", "DNA123"),
        ('Employees of "ABC Ltd." since 2020', "Ltd", "ABC Ltd."),
        ("What's the weather in Berlin's centre", "Berlin", "Berlin"),  # an apostrophe is no quote
    ],
)
def test_a_run_inside_quotes_is_the_quoted_value(request_text, piece, value):
    at = request_text.rindex(piece)
    assert _word_span(request_text, at, at + len(piece), 0, len(request_text)) == value


ROUTE = {
    "name": "plan_route",
    "description": "Plan a route by road, e.g. from Berlin.",
    "parameters": {
        "type": "object",
        "properties": {
            "start": {"type": "string", "description": "Where the route starts."},
            "end": {"type": "string", "description": "Where it ends."},
            "mode": {"type": "string", "description": "How to travel."},
            "year": {"type": "integer"},
        },
        "required": ["start", "end"],
    },
}


def _route_labelling(pieces, scores):
    """A Labelling of ROUTE over ``pieces`` (the first outside the user message): "none" scores -1 on every
    token, ``scores`` maps (token index, parameter) to a log-posterior, every other entry -9."""
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    names = list(ROUTE["parameters"]["properties"])
    logp = torch.full((len(pieces), 1 + len(names)), -9.0)
    logp[:, 0] = -1.0
    for (i, name), value in scores.items():
        logp[i, 1 + names.index(name)] = value
    keys = [("plan_route", name, 0, 0) for name in names]
    return Labelling("".join(pieces), ends, (len(pieces[0]), total), keys, logp)


def test_one_string_keeps_one_run_per_string_and_fills_a_required_one_from_the_request():
    pieces = [
        "<u>",
        "Route",
        " from",
        " San",
        " Francisco",
        " to",
        " Los",
        " Angeles",
        " by",
        " car",
        " in",
        " 2020",
        " fast",
    ]
    lab = _route_labelling(
        pieces,
        {
            (3, "end"): -0.2,  # end is labelled on both names; it scores "Los Angeles" higher
            (6, "end"): -0.1,
            (
                3,
                "start",
            ): -2.0,  # start is labelled nowhere, but scores "San Francisco" best after end's words
            (4, "start"): -1.5,
            (6, "start"): -0.5,
            (1, "start"): -1.2,  # "Route" only names the tool: no value
            (2, "mode"): -0.5,  # an optional parameter on several runs ("from" is no value: a function word)
            (9, "mode"): -0.3,
            (12, "mode"): -0.6,
            (11, "year"): -0.1,
        },
    )
    specs = [normalize_tool({"type": "function", "function": ROUTE})]
    runs = typed_runs(lab.runs(), specs)
    assert runs[("plan_route", "end")] == ["San Francisco", "Los Angeles"]  # words and names, whole
    assert lab.score(("plan_route", "end"), "Los Angeles") == pytest.approx(-0.1)
    assert lab.score(("plan_route", "end"), "Berlin") == float("-inf")
    out = one_string(runs, specs, lab)
    assert out == {
        ("plan_route", "end"): ["Los Angeles"],
        ("plan_route", "start"): ["San Francisco"],
        ("plan_route", "year"): ["2020"],
    }
    assert runs[("plan_route", "mode")] == ["car", "fast"]  # the input is not modified
    # no fill for a tool the turn does not call (nothing bound), nor with fill=False
    assert one_string({}, specs, lab) == {}
    assert ("plan_route", "start") not in one_string(runs, specs, lab, fill=False)
    # two string parameters on one text: the one declared first keeps it; the other, required, is filled, and
    # start and end, an ordered pair, then take their values in the request's order
    both = {("plan_route", "end"): ["Los Angeles"], ("plan_route", "start"): ["Los Angeles"]}
    assert one_string(both, specs, lab, fill=False) == {("plan_route", "start"): ["Los Angeles"]}
    assert one_string(both, specs, lab) == {
        ("plan_route", "start"): ["San Francisco"],
        ("plan_route", "end"): ["Los Angeles"],
    }
    swapped = {("plan_route", "start"): ["Los Angeles"], ("plan_route", "end"): ["San Francisco"]}
    assert one_string(swapped, specs, lab)[("plan_route", "start")] == ["San Francisco"]
    # "from" and "to" say which end a value is, whatever the order
    back = "<u>Route to Los Angeles from San Francisco"
    cued = Labelling(back, [3, len(back)], (3, len(back)), lab.keys, torch.zeros(2, lab.logp.shape[1]))
    for start, end in (("San Francisco", "Los Angeles"), ("Los Angeles", "San Francisco")):
        out = one_string({("plan_route", "start"): [start], ("plan_route", "end"): [end]}, specs, cued)
        assert out == {("plan_route", "start"): ["San Francisco"], ("plan_route", "end"): ["Los Angeles"]}
    # a number a number parameter holds is no value for a string parameter
    held = {("plan_route", "year"): ["2020"], ("plan_route", "end"): ["2020", "Los Angeles"]}
    assert one_string(held, specs, lab, fill=False)[("plan_route", "end")] == ["Los Angeles"]


@pytest.mark.parametrize(
    ("a", "b", "first"),
    [
        ("company1", "company2", "company1"),
        ("place2", "place1", "place1"),
        ("start_location", "end_location", "start_location"),
        ("to_timezone", "from_timezone", "from_timezone"),
        ("origin", "destination", "origin"),
        ("source_lang", "target_lang", "source_lang"),
        ("team", "league", None),
        ("start_date", "end_time", None),  # two words differ: no pair
        ("x1", "y2", None),
    ],
)
def test_ordered_pairs_of_parameters(a, b, first):
    assert _first_of_pair(a, b) == first


def test_one_string_orders_number_pairs_as_the_request_states_them():
    number, whole = {"type": "number"}, {"type": "integer"}
    props = {"num1": whole, "num2": whole, "scale": number}
    specs = [_spec("math.gcd", "Greatest common divisor of two integers.", props, ["num1", "num2"])]
    pieces = ["<u>", "Find", " the", " GCD", " of", " 36", " and", " 24", " at", " 0.5"]
    ends = list(itertools.accumulate(len(p) for p in pieces))
    keys = [("math.gcd", n, 0, 0) for n in ("num1", "num2", "scale")]
    lab = Labelling("".join(pieces), ends, (len(pieces[0]), ends[-1]), keys, torch.zeros(len(pieces), 4))
    swapped = {("math.gcd", "num1"): ["24"], ("math.gcd", "num2"): ["36"], ("math.gcd", "scale"): ["0.5"]}
    out = one_string(swapped, specs, lab)
    assert out == {("math.gcd", "num1"): ["36"], ("math.gcd", "num2"): ["24"], ("math.gcd", "scale"): ["0.5"]}
    # "3" is no whole number of the request ("36" holds it): nothing is moved
    part = {("math.gcd", "num1"): ["24"], ("math.gcd", "num2"): ["3"]}
    assert one_string(part, specs, lab) == part


def test_named_flags_set_the_booleans_a_request_names():
    flag = {"type": "boolean"}
    props = {
        "case_id": {"type": "string"},
        "include_dissent": flag,
        "full_text": flag,
        "closed_status": flag,
        "fixed": {"type": "boolean", "const": True},
    }
    specs = [_spec("case.details", "Look up a court case.", props, ["case_id"])]
    text = "Get case 'R vs Adams' including dissents, but don't return the full texts; is it closed? Fixed."
    pieces = ["<u>", text]
    keys = [("case.details", n, 0, 0) for n in props]
    lab = Labelling(
        "".join(pieces), [3, 3 + len(text)], (3, 3 + len(text)), keys, torch.zeros(2, 1 + len(keys))
    )
    runs = {("case.details", "case_id"): ["R vs Adams"]}
    out = named_flags(runs, specs, lab)
    assert out == {
        ("case.details", "case_id"): ["R vs Adams"],
        ("case.details", "include_dissent"): ["true"],  # "include" says what to do; "dissents" names it
        ("case.details", "full_text"): ["false"],  # "don't" within the three words before "full"
    }  # closed_status: "status" is no word of the request; a const flag is left as it is
    assert named_flags({}, specs, lab) == {}  # a tool the turn does not call
    pinned, _ = pin_bound_values(specs, {k: v[0] for k, v in out.items()})
    props = pinned[0].parameters["properties"]
    assert props["include_dissent"]["enum"] == [True] and props["full_text"]["enum"] == [False]
    assert runs == {("case.details", "case_id"): ["R vs Adams"]}  # the input is not modified


def test_numbers_read_thousands_separators_and_exponents():
    text = (
        "<u>Drive 12,000 miles, cash_flows=[200,300,400], charges 1e-9 and 2.5E3; x2 and 1,2 or $2,000,000."
    )
    lab = Labelling(text, [3, len(text)], (3, len(text)), [], torch.zeros(2, 1))
    assert [t for t, _ in lab.numbers()] == [
        "12000",
        "200",
        "300",
        "400",
        "1e-9",
        "2.5E3",
        "1",
        "2",
        "2000000",
    ]
    assert lab.number_lists() == [[1, 2, 3], [4, 5], [6, 7]]  # a list written without spaces stays a list
    specs = [normalize_tool(READ)]  # end_line: integer, ratio: number
    runs = typed_runs({("read_file", "end_line"): ["12,000", "1e3"], ("read_file", "ratio"): ["1e-9"]}, specs)
    assert runs == {
        ("read_file", "end_line"): ["12000"],
        ("read_file", "ratio"): ["1e-9"],
    }  # 1e3 is no integer


def test_token_pieces_keep_characters_split_over_byte_tokens_whole():
    from model.binding.labelling import token_pieces

    tok = _shipped().tokenizer
    for text in ["¿Dónde está load_bundle?", "load_bundle 函数在哪里定义？", "Wetter in München"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert any("\ufffd" in tok.decode([i]) for i in ids)  # byte tokens: alone they decode to U+FFFD
        pieces = token_pieces(tok, ids)
        assert len(pieces) == len(ids) and "".join(pieces) == text


def test_a_number_no_json_number_spells_is_not_pinned():
    specs = [normalize_tool(READ)]  # ratio: number
    pinned, n = pin_bound_values(specs, {("read_file", "ratio"): "1e400"})  # float("1e400") is inf
    assert n == 0 and "enum" not in pinned[0].parameters["properties"]["ratio"]
    text = "<u>mean of 1e400 and 2"
    lab = Labelling(text, [3, len(text)], (3, len(text)), [], torch.zeros(2, 1))
    items = {"type": "array", "items": {"type": "number"}}
    held = number_arrays([_spec("mean", "Mean of numbers.", {"xs": items}, ["xs"])], lab)
    assert held.specs[0].parameters["properties"]["xs"]["items"]["enum"] == [
        2.0
    ]  # the list is held, inf left out
    assert held.bound == {}


def _tools(*names):
    return [
        normalize_tool({"type": "function", "function": {"name": n, "description": "", "parameters": {}}})
        for n in names
    ]


def test_named_tool_of_keeps_the_tool_whose_name_the_request_names():
    from model.binding.rules import _name_words, _same_word, named_tool_of

    assert _name_words("math.triangle_area_heron") == ["math", "triangle", "area", "heron"]
    assert _name_words("getForecast") == ["get", "forecast"]
    assert (
        _same_word("defines", "definition") and _same_word("detail", "details") and not _same_word("is", "it")
    )

    def named(request, *names):
        lab = Labelling("<u>" + request, [3, 3 + len(request)], (3, 3 + len(request)), [], torch.zeros(2, 1))
        return named_tool_of(_tools(*names), lab)

    capital = ("country_info.largest_city", "country_info.capital", "country_info.population")
    assert (
        named("What is the capital of Brazil?", *capital) == "country_info.capital"
    )  # "country_info" shared
    assert named("Calculate the LCM of 18 and 12.", "math.gcd", "math.sqrt", "math.lcm") == "math.lcm"
    assert named("Which file defines tool_call_grammar?", "find_definition", "read_file") is None  # a tie
    assert named("Will it rain in Paris tomorrow?", "get_current_weather", "get_forecast") is None  # no name
    assert named("Weather in Paris", "get_current_weather") is None  # one tool: nothing to choose
