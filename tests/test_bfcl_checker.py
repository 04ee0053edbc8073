"""BFCL AST checker against hand-made answers (pure Python, no model)."""

from __future__ import annotations

import json

import pytest

from evals.bfcl import (
    check_call,
    check_output,
    evaluate,
    load_category,
    normalize_string,
    to_json_schema,
)

AREA = {
    "name": "calc_area",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "integer"},
            "height": {"type": "float"},
            "unit": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "dict", "properties": {"a": {"type": "integer"}}},
        },
        "required": ["base", "height"],
    },
}
GT = {
    "calc_area": {
        "base": [10],
        "height": [5.0],
        "unit": ["cm", ""],
        "tags": [["Big Red", "x"], ""],
        "opts": [{"a": [1]}, ""],
    }
}


def test_normalize_string_rules():
    assert normalize_string("April 1, 2024") == normalize_string("april 1 2024") == "april12024"
    assert normalize_string("New-York_City.") == "newyorkcity"
    assert normalize_string("it's") == 'it"s'


def test_exact_and_normalised_values_pass():
    assert check_call(AREA, ("calc_area", {"base": 10, "height": 5.0}), GT).valid
    assert check_call(
        AREA, ("calc_area", {"base": 10, "height": 5, "unit": "CM"}), GT
    ).valid  # int -> float ok
    assert check_call(AREA, ("calc_area", {"base": 10, "height": 5.0, "tags": ["big red", "X"]}), GT).valid
    assert check_call(AREA, ("calc_area", {"base": 10, "height": 5.0, "opts": {"a": 1}}), GT).valid


@pytest.mark.parametrize(
    ("call", "error_type"),
    [
        (("calc_volume", {"base": 10, "height": 5.0}), "wrong_func_name"),
        (("calc_area", {"base": 10}), "missing_required"),
        (("calc_area", {"base": 10, "height": 5.0, "color": "red"}), "unexpected_param"),
        (("calc_area", {"base": 10.0, "height": 5.0}), "type_error"),  # float for an integer fails
        (("calc_area", {"base": True, "height": 5.0}), "type_error"),  # bool is not an int
        (("calc_area", {"base": 11, "height": 5.0}), "value_error:others"),
        (("calc_area", {"base": 10, "height": 5.0, "unit": "mm"}), "value_error:string"),
        (("calc_area", {"base": 10, "height": 5.0, "tags": ["x", "big red"]}), "value_error:list"),
        (("calc_area", {"base": 10, "height": 5.0, "opts": {"a": 2}}), "value_error:dict"),
        # BFCL: an accepted "" disables the item type check, the value check still fails
        (("calc_area", {"base": 10, "height": 5.0, "tags": ["x", 3]}), "value_error:list"),
    ],
)
def test_rule_violations_fail(call, error_type):
    res = check_call(AREA, call, GT)
    assert not res.valid
    assert res.error_type == error_type


def test_nested_item_types_are_checked():
    gt = {"calc_area": {"base": [10], "height": [5.0], "tags": [["x", "y"]]}}
    res = check_call(AREA, ("calc_area", {"base": 10, "height": 5.0, "tags": ["x", 3]}), gt)
    assert not res.valid and res.error_type == "type_error"


def test_optional_without_empty_marker_is_required():
    gt = {"calc_area": {"base": [10], "height": [5.0], "unit": ["cm"]}}
    res = check_call(AREA, ("calc_area", {"base": 10, "height": 5.0}), gt)
    assert not res.valid and res.error_type == "missing_optional"


def test_parallel_is_order_free_and_counts_calls():
    funcs = [AREA]
    gt = [{"calc_area": {"base": [1], "height": [2.0]}}, {"calc_area": {"base": [3], "height": [4.0]}}]
    calls = [("calc_area", {"base": 3, "height": 4.0}), ("calc_area", {"base": 1, "height": 2})]
    assert check_output("parallel", funcs, calls, gt).valid
    assert not check_output("parallel", funcs, calls[:1], gt).valid
    assert not check_output("parallel", funcs, [calls[0], calls[0]], gt).valid
    # simple/multiple: exactly one call
    assert not check_output("simple_python", funcs, calls, gt[:1]).valid


def test_irrelevance_scoring():
    assert check_output("irrelevance", [AREA], [], None).valid
    assert not check_output("irrelevance", [AREA], [("calc_area", {"base": 1, "height": 1.0})], None).valid


def test_to_json_schema_converts_bfcl_types():
    s = to_json_schema(AREA["parameters"])
    assert s["type"] == "object"
    assert s["properties"]["height"]["type"] == "number"
    assert s["properties"]["opts"]["type"] == "object"
    assert to_json_schema({"type": "tuple", "items": {"type": "any"}}) == {"type": "array", "items": {}}


def test_evaluate_with_fake_chat_on_files(tmp_path):
    q = [
        {"id": "a", "question": [[{"role": "user", "content": "area 10 by 5"}]], "function": [AREA]},
        {"id": "b", "question": [[{"role": "user", "content": "area 7 by 5"}]], "function": [AREA]},
    ]
    ans = [
        {"id": "a", "ground_truth": [GT]},
        {"id": "b", "ground_truth": [{"calc_area": {"base": [7], "height": [5.0]}}]},
    ]
    (tmp_path / "q.json").write_text("\n".join(json.dumps(x) for x in q))
    (tmp_path / "a.json").write_text("\n".join(json.dumps(x) for x in ans))
    questions, gt = load_category(data=tmp_path / "q.json", answers=tmp_path / "a.json")

    def chat(messages, tools):
        assert tools[0]["function"]["parameters"]["type"] == "object"
        return [("calc_area", {"base": 10, "height": 5})], True, "raw"

    rep = evaluate("simple_python", questions, gt, chat)
    assert rep.n == 2 and rep.accuracy == 0.5 and rep.parse_rate == 1.0
    assert [r["correct"] for r in rep.results] == [True, False]
    # without answers: irrelevance, a call is wrong
    questions, none = load_category(data=tmp_path / "q.json")
    assert none is None
    assert evaluate("irrelevance", questions, None, chat).accuracy == 0.0


def test_rows_without_bfcl_keys_are_one_line_errors(tmp_path):
    # a question without "function" was a KeyError traceback from `agentkit eval bfcl --data`
    q = tmp_path / "q.json"
    q.write_text('{"id": "a", "question": [[]], "function": []}\n\n{"id": "b", "question": "hi"}\n')
    with pytest.raises(
        ValueError,
        match=r"q.json:3: a BFCL row is a JSON object with id, question, function; missing 'function'",
    ):
        load_category(data=q)
    q.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"q.json:1: .* missing 'id'"):
        load_category(data=q)
    q.write_text('{"id": "a", "question": [[]], "function": []}\n')
    (tmp_path / "a.json").write_text('{"id": "a", "answer": []}\n')
    with pytest.raises(ValueError, match=r"a.json:1: .* with id, ground_truth; missing 'ground_truth'"):
        load_category(data=q, answers=tmp_path / "a.json")


def test_unknown_category_raises():
    with pytest.raises(ValueError, match="unknown BFCL category"):
        load_category("java")


def test_the_bfcl_dialect_is_translated_by_the_adapter():
    from evals.bfcl import to_json_schema

    got = to_json_schema(
        {
            "type": "dict",
            "properties": {
                "x": {"type": "float", "optional": True},
                "ys": {"type": "tuple", "items": {"type": "int"}},
                "v": {"type": ["any", "null"]},
                "w": {"type": ["float", "null"]},
            },
        }
    )
    assert got == {
        "type": "object",
        "properties": {
            "x": {"type": "number"},
            "ys": {"type": "array", "items": {"type": "integer"}},
            "v": {},
            "w": {"type": ["number", "null"]},
        },
    }


def test_the_calibration_curve_counts_forced_values_and_their_precision():
    from evals.calibrate_binder import curve

    points = [("string", 0.95, True), ("string", 0.9, False), ("string", 0.2, True), ("number", 0.99, True)]
    rows = {r["threshold"]: r for r in curve(points, "string")}
    assert rows[0.9] == {"threshold": 0.9, "coverage": 2 / 3, "precision": 0.5, "n_forced": 2}
    assert rows[0.95]["precision"] == 1.0 and rows[0.98]["n_forced"] == 0
