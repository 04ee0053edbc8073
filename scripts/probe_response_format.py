"""Probe of ``response_format`` with tools under ``tool_choice="auto"``: does the turn call a tool where the model
would without ``response_format``, and answer in JSON where it would answer in prose?

    .venv/bin/python scripts/probe_response_format.py [--checkpoint DIR] [--seeds 5]

Five requests against the tests' ``get_weather`` tool (a weather question, small talk, a greeting, arithmetic, and
the turn after a tool result), each over ``--seeds`` seeds without and with ``{"type": "json_object"}``; prints per
request and mode the outcomes ``CALL`` / ``JSON`` / ``prose`` (docs/SERVING.md, ``response_format``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from serve_helpers import WEATHER  # noqa: E402

from model.threads import apply_threads  # noqa: E402
from model.turn.chat import ChatModel  # noqa: E402

ASK = {"role": "user", "content": "What is the weather in Berlin?"}
CALLED = {
    "role": "assistant",
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Berlin"}'},
        }
    ],
}
RESULT = {
    "role": "tool",
    "tool_call_id": "c1",
    "content": '{"city": "Berlin", "temperature": 4.0, "conditions": "rain"}',
}
CASES = {
    "weather": [ASK],
    "joke": [{"role": "user", "content": "Tell me a joke."}],
    "hello": [{"role": "user", "content": "Say hello to me."}],
    "2+2": [{"role": "user", "content": "What is 2+2?"}],
    "after a result": [ASK, CALLED, RESULT],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    apply_threads(1)
    cm = ChatModel.load(args.checkpoint)
    for name, messages in CASES.items():
        for rf in (None, {"type": "json_object"}):
            outcomes = []
            for seed in range(args.seeds):
                out = cm.chat(messages, [WEATHER], seed=seed, response_format=rf, max_new_tokens=64)
                json_answer = out.text.strip().startswith("{")
                outcomes.append("CALL" if out.tool_calls else "JSON" if json_answer else "prose")
            print(json.dumps({"request": name, "response_format": rf is not None, "outcomes": outcomes}))


if __name__ == "__main__":
    main()
