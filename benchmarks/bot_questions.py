"""The example bots beyond the README's question: other definitions in this repository, other places and days.

Runs both bundles (``examples/code_search``, ``examples/weather``) on the embedded checkpoint (CPU, 2 threads,
seed 0 unless ``--seed``) with questions no test was written for, and scores each run:

* code search: the first call is ``find_definition`` with the asked name (``kind`` any or the asked kind), and the
  final answer cites the path of the tool's first match;
* weather (offline: an Open-Meteo fake answering any place name, the response shapes of
  ``tools/weather_fake.py``): the first call is the expected tool with the asked place (and days or units
  when asked), and the final answer states the temperature the fake returned.

Prints the per-question transcript, the ``call``/``answer`` rates, the fact precision (of the facts the answers
state, words with a digit and paths, the share spelled as the tool's response spells them: how garbled the
answers are) and the model's mean time per question (seconds inside the backend). ``--quick``: 3 questions per
bot. ``--json``: one JSON object with ``targets``.

Usage: ``python benchmarks/bot_questions.py [--checkpoint DIR] [--seed N] [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks._common import emit, target  # noqa: E402

#: (question, expected name, expected kind or None)
CODE_QUESTIONS = (
    ("Where is the class GrammarConstraint defined?", "GrammarConstraint", None),
    ("Where is make_backend defined?", "make_backend", None),
    ("Which file defines tool_call_grammar?", "tool_call_grammar", None),
    ("Where is the function copy_probe defined?", "copy_probe", None),
    ("Where can I find the class ChatModel?", "ChatModel", None),
    ("Where is cap_output defined?", "cap_output", None),
    ("Show me where load_checkpoint is defined.", "load_checkpoint", None),
    ("Where is the function grounding_regex defined?", "grounding_regex", None),
)
#: (question, tool, place, extra expected arguments)
WEATHER_QUESTIONS = (
    ("What's the weather like in Tokyo right now?", "get_current_weather", "Tokyo", {}),
    ("Will it rain in Paris tomorrow?", "get_forecast", "Paris", {"days": 2}),
    ("Give me a 5-day forecast for Madrid.", "get_forecast", "Madrid", {"days": 5}),
    ("How cold is it in Oslo right now?", "get_current_weather", "Oslo", {}),
    ("What's the forecast for Lisbon for the next 3 days?", "get_forecast", "Lisbon", {"days": 3}),
    (
        "What is the temperature in Chicago right now in Fahrenheit?",
        "get_current_weather",
        "Chicago",
        {"units": "imperial"},
    ),
    ("Current weather for Nairobi, please.", "get_current_weather", "Nairobi", {}),
    ("Is it raining in Seoul now?", "get_current_weather", "Seoul", {}),
)


def any_place_fake(request: Any) -> Any:
    """``tools.weather_fake.fake_open_meteo``, with any unknown place name geocoded to a made-up city."""
    import httpx

    from tools.weather_fake import PLACES, fake_open_meteo

    if request.url.path == "/v1/search":
        q = dict(urllib.parse.parse_qsl(request.url.query.decode()))
        name = q.get("name", "").strip()
        if name and name.lower() not in PLACES:
            entry = copy.deepcopy(PLACES["berlin"][0])
            entry.update(name=name.split(",")[0], admin1=name, admin3=name, admin4=name)
            return httpx.Response(200, json={"results": [entry], "generationtime_ms": 0.5})
    return fake_open_meteo(request)


def fact_counts(answer: str | None, calls: list[Any]) -> tuple[int, int]:
    """``(stated, right)``: the facts the answer states (words with a digit, and paths:
    :func:`evals.heldout.answer_facts`) and how many of them the tools' responses spell the same way
    (a garbled ``2026---29`` or ``km/mk/h`` is stated but not right)."""
    from evals.heldout import answer_facts

    facts = answer_facts(answer or "")
    told = " ".join(json.dumps(c.result, ensure_ascii=False) for c in calls if c.result is not None)
    return len(facts), sum(f in told for f in facts)


def _calls(result: Any) -> list[Any]:
    return [rec for step in result.steps for rec in step.tool_calls]


def _ask(agent: Any, question: str) -> tuple[Any, list[Any], Any]:
    """Run one question (a run that ended in an error keeps its result): the result, its calls, the first."""
    from agentkit.errors import AgentRunError

    try:
        r = agent.run(question)
    except AgentRunError as exc:
        r = exc.result
    calls = _calls(r)
    return r, calls, calls[0] if calls else None


def _row(bot: str, question: str, r: Any, calls: list[Any], call_ok: bool, answer_ok: bool) -> dict[str, Any]:
    """One question's record: its calls, answer, verdicts, fact counts and model time (seconds)."""
    return {
        "bot": bot,
        "question": question,
        "calls": [(c.name, c.arguments) for c in calls],
        "answer": r.answer,
        "call_ok": call_ok,
        "answer_ok": answer_ok,
        "facts": fact_counts(r.answer, calls),
        "model_seconds": r.timing.model_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the questions; print the transcript and rates (or one JSON object); return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="the backend's sampling seed")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    a = ap.parse_args(argv)

    import httpx
    import torch

    from agentkit.backends import make_backend
    from agentkit.bundle import load_bundle
    from tools import code_search, weather

    torch.set_num_threads(a.threads)
    from agentkit.errors import BackendError

    backend = make_backend("embedded", a.checkpoint, seed=a.seed, threads=a.threads)
    try:
        _ = backend.chat_model
    except BackendError as exc:  # a missing folder or a bad decoding file: one line, exit status 2
        print(f"bot_questions: {exc}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    n = 3 if a.quick else None

    code_search.set_root(ROOT)
    try:
        agent = load_bundle(ROOT / "examples" / "code_search" / "bundle.yaml").make_agent(backend=backend)
        for q, name, kind in CODE_QUESTIONS[:n]:
            r, calls, first = _ask(agent, q)
            call_ok = bool(
                first
                and first.name == "find_definition"
                and first.arguments.get("name") == name
                and first.arguments.get("kind", "any") in ("any", kind or "any", "function", "class")
            )
            path = None
            if first is not None and isinstance(first.result, dict) and first.result.get("matches"):
                path = first.result["matches"][0]["path"]
            answer_ok = bool(call_ok and path and r.answer and path in r.answer)
            rows.append(_row("code_search", q, r, calls, call_ok, answer_ok))
    finally:
        code_search.set_root(None)

    weather.configure(client=httpx.Client(transport=httpx.MockTransport(any_place_fake)), retry_wait=0)
    try:
        agent = load_bundle(ROOT / "examples" / "weather" / "bundle.yaml").make_agent(backend=backend)
        for q, tool_name, place, extra in WEATHER_QUESTIONS[:n]:
            r, calls, first = _ask(agent, q)
            args = dict(first.arguments) if first else {}
            call_ok = bool(
                first
                and first.name == tool_name
                and args.get("place") == place
                and all(args.get(k) == v for k, v in extra.items())
                and args.get("units", "metric") == extra.get("units", "metric")
            )
            temp = None
            if first is not None and isinstance(first.result, dict):
                res = first.result
                temp = (
                    res.get("temperature")
                    if "temperature" in res
                    else (res.get("days") or [{}])[0].get("temperature_max")
                )
            answer_ok = bool(call_ok and temp is not None and r.answer and str(temp) in r.answer)
            rows.append(_row("weather", q, r, calls, call_ok, answer_ok))
    finally:
        weather.set_client(None)

    call_rate = sum(r["call_ok"] for r in rows) / len(rows)
    answer_rate = sum(r["answer_ok"] for r in rows) / len(rows)
    mean_s = sum(r["model_seconds"] for r in rows) / len(rows)
    stated = sum(r["facts"][0] for r in rows)
    fact_precision = sum(r["facts"][1] for r in rows) / max(1, stated)
    report = {
        "checkpoint": a.checkpoint or "agentkit-tiny",
        "seed": a.seed,
        "threads": a.threads,
        "n": len(rows),
        "call_rate": call_rate,
        "answer_rate": answer_rate,
        "mean_model_seconds": mean_s,
        "fact_precision": fact_precision,
        "rows": rows,
        "targets": [
            target("bots on unseen questions: exact first call", call_rate, 1.0, True),
            target("bots on unseen questions: answer carries the tool's data", answer_rate, 1.0, True),
            target(f"bots: model time per question on {a.threads} thread(s) (s)", mean_s, 5.0, False),
        ],
    }
    if not a.json:
        for r in rows:
            mark = ("call ok" if r["call_ok"] else "CALL WRONG") + (
                ", answer ok" if r["answer_ok"] else ", ANSWER WRONG"
            )
            print(
                f"[{r['bot']}] {r['question']}\n    {r['calls'][:2]}\n    -> {r['answer']!r}  ({mark}, {r['model_seconds']:.2f} s)"
            )
        print(
            f"calls {call_rate:.2f}  answers {answer_rate:.2f}  facts spelled as the tool wrote them {fact_precision:.2f}"
            f" ({stated} stated)  model time {mean_s:.2f} s per question (n={len(rows)}, seed {a.seed})"
        )
    emit(report, a.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
