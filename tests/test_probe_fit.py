"""``scripts/probe_fit.py``: the tagger-read "does any offered tool fit?" scores and their held-out outcomes."""

from __future__ import annotations

from script_modules import load_script

from schema import normalize_tool


def _probe_module():
    return load_script("probe_fit")


def _tool(name, properties, required):
    params = {"type": "object", "properties": properties, "required": required}
    return normalize_tool({"type": "function", "function": {"name": name, "parameters": params}})


WEATHER = _tool("weather", {"place": {"type": "string"}, "days": {"type": "integer"}}, ["place", "days"])
SEARCH = _tool("search", {"q": {"type": "string"}, "exact": {"type": "boolean"}}, ["q", "exact"])
LIST = _tool("list_all", {"verbose": {"type": "boolean"}}, [])


def test_fit_scores_mean_required_max_over_tools():
    scores = _probe_module().fit_scores
    scored = {("weather", "place"): [("Oslo", 0.9), ("Rome", 0.2)], ("search", "q"): [("x", 0.3)]}
    # weather: mean(0.9, 0 for days without a candidate) = 0.45; search: its one required string, 0.3
    assert scores(scored, [WEATHER, SEARCH]) == {"required": 0.45, "required0": 0.45, "any": 0.9}
    # a tool without required string/number parameters counts as fitting (1.0), or as 0 for "required0"
    assert scores(scored, [WEATHER, LIST]) == {"required": 1.0, "required0": 0.45, "any": 0.9}
    assert scores({}, [SEARCH]) == {"required": 0.0, "required0": 0.0, "any": 0.0}


def test_simulate_forces_prose_below_threshold():
    mod = _probe_module()
    rows = [
        {"i": 0, "kind": "unanswerable", "unfit": True, "required": 0.1},
        {"i": 1, "kind": "call", "unfit": False, "required": 0.2},
        {"i": 2, "kind": "call", "unfit": False, "required": 0.9},
        {"i": 3, "kind": "no_tool", "unfit": True, "required": 0.8},
    ]
    evaluation = {
        "results": [
            {"kind": "unanswerable", "unfit": True, "calls_made": 1, "correct": False},
            {"kind": "call", "unfit": False, "calls_made": 1, "correct": True},
            {"kind": "call", "unfit": False, "calls_made": 1, "correct": True},
            {"kind": "no_tool", "unfit": True, "calls_made": 0, "correct": True},
            {"kind": "answer_after_tool", "unfit": False, "calls_made": 0, "correct": False},
        ]
    }
    out = mod.simulate(rows, evaluation, "required", 0.5)
    assert out == {"unfit_in_prose": "2/2", "fit_with_a_call": "1/2", "exact": 0.6}
    point = mod.operating_point(rows, "required", 0.5)
    assert point["fit_kept"] == 0.5 and point["unfit_below"] == "1/2" and point["other_tool_below"] == "1/1"
    assert mod.separation(rows, "required") == {"unfit": 0.75, "small_talk": 0.5, "other_tool": 1.0}
