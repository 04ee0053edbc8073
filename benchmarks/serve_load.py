"""Load on ``agentkit serve``: throughput and latency at concurrency 1, 4 and 16, parse-and-validate rate, and the
server's cost over the runtime's own batched ``generate``.

A real server (uvicorn on 127.0.0.1, ephemeral port, in this process) over the embedded default checkpoint. The
workload is a fixed list of requests cycled by every level: three in four are tool requests (weather, arithmetic
and lookup tools; ``tool_choice`` auto, required or named), one in four is plain chat; each has its own seed and
``max_tokens`` of one canvas. At concurrency C, C clients (httpx, asyncio) send the list in a closed loop.

* requests/s = requests / wall time; p50 / p95 = latency percentiles (seconds, send to full response);
* parse-and-validate = share of tool calls whose ``arguments`` parse as JSON and validate against the declared
  schema (``jsonschema``), over all levels;
* server cost = server wall time for the first 16 requests at concurrency 16, over the wall time of one
  ``model.runtime.generate`` call on the same 16 prepared prompts (left-padded batch, same constraints), minus 1.

Usage::

    .venv/bin/python benchmarks/serve_load.py [--quick] [--json] [--requests N] [--threads T]

Targets (issue #15): requests/s at 16 >= 2x at 1 on 2 CPU cores; p95 at 16 <= 3x p50 at 1; parse-and-validate
100%; server cost <= 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from serve_helpers import ADD  # the same tool the client tests use

from benchmarks._common import emit, target

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                },
                "required": ["city"],
            },
        },
    },
    ADD,
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a record by key",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string", "maxLength": 24}},
                "required": ["key"],
            },
        },
    },
]
QUESTIONS = [
    "What is the weather in Berlin?",
    "What is 17 plus 25?",
    "Look up the record abc-42",
    "Hello, who are you?",
    "Is it raining in Paris right now?",
    "Add 3 and 9",
    "Find record zz9",
    "Tell me a fun fact",
]


def workload(n: int, max_tokens: int) -> list[dict[str, Any]]:
    """``n`` request bodies: tool requests (auto / required / named) and, one in four, plain chat."""
    out = []
    choices: list[Any] = ["auto", "required", {"type": "function", "function": {"name": "lookup"}}]
    for i in range(n):
        q = QUESTIONS[i % len(QUESTIONS)]
        body: dict[str, Any] = {
            "model": "agentkit-tiny",
            "messages": [{"role": "user", "content": q}],
            "seed": i,
            "max_tokens": max_tokens,
        }
        if i % 4 != 3:
            body["tools"] = TOOLS
            body["tool_choice"] = choices[i % 4]
        out.append(body)
    return out


def check(body: dict[str, Any], data: dict[str, Any]) -> tuple[int, int]:
    """(tool calls, tool calls that parse and validate) of one response."""
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in body.get("tools", [])}
    calls = data["choices"][0]["message"].get("tool_calls") or []
    ok = 0
    for c in calls:
        try:
            jsonschema.validate(json.loads(c["function"]["arguments"]), schemas[c["function"]["name"]])
            ok += 1
        except (ValueError, KeyError, jsonschema.ValidationError):
            pass
    return len(calls), ok


async def level(url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Send ``bodies`` with ``concurrency`` closed-loop clients."""
    import httpx

    latencies: list[float] = []
    calls = valid = 0
    queue = list(enumerate(bodies))

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal calls, valid
        while queue:
            _, body = queue.pop(0)
            t0 = time.perf_counter()
            r = await client.post(url + "/v1/chat/completions", json=body)
            latencies.append(time.perf_counter() - t0)
            r.raise_for_status()
            n, ok = check(body, r.json())
            calls += n
            valid += ok

    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {
        "concurrency": concurrency,
        "requests": len(bodies),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(bodies) / wall, 3),
        "p50_s": round(statistics.median(lat), 3),
        "p95_s": round(lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))], 3),
        "tool_calls": calls,
        "valid_calls": valid,
    }


def raw_generate(engine: Any, bodies: list[dict[str, Any]]) -> float:
    """Wall seconds of one batched ``generate`` over the prepared prompts of ``bodies``."""
    import torch

    from agentkit.serve.schemas import ChatCompletionRequest
    from model.runtime import generate

    turns = [engine.prepare(ChatCompletionRequest.model_validate(b))[0] for b in bodies]
    width = max(len(t.input_ids) for t in turns)
    pad = engine.chat_model.settings.pad_token_id
    dev = engine.chat_model.model.device
    ids = torch.tensor([[pad] * (width - len(t.input_ids)) + t.input_ids for t in turns], device=dev)
    attn = torch.tensor(
        [[0] * (width - len(t.input_ids)) + [1] * len(t.input_ids) for t in turns], device=dev
    )
    settings = max((t.settings for t in turns), key=lambda s: s.max_new_tokens)
    t0 = time.perf_counter()
    generate(
        engine.chat_model.model,
        ids,
        settings,
        attention_mask=attn,
        constraints=[t.constraint for t in turns],
        seed=0,
    )
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 requests per level (default 48)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--requests", type=int, default=None, help="requests per concurrency level")
    ap.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: all cores)"
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    args = ap.parse_args()
    import torch
    from serve_helpers import running_server

    from agentkit.serve import load_engine

    torch.set_num_threads(args.threads)
    n = args.requests or (16 if args.quick else 48)
    engine = load_engine(None, max_batch=16, device=args.device)
    canvas = int(engine.chat_model.model.config.canvas_length)
    bodies = workload(n, max_tokens=canvas)
    levels = []
    with running_server(engine) as (url, _):
        asyncio.run(level(url, bodies[:2], 1))  # warm-up: grammar compiler, tokenizer caches
        for c in (1, 4, 16):
            levels.append(asyncio.run(level(url, bodies, c)))
        server16 = asyncio.run(level(url, bodies[:16], 16))["wall_s"]
    raw16 = min(raw_generate(engine, bodies[:16]) for _ in range(2))
    engine.close(wait=False)
    by = {lv["concurrency"]: lv for lv in levels}
    calls = sum(lv["tool_calls"] for lv in levels)
    valid = sum(lv["valid_calls"] for lv in levels)
    speedup = by[16]["requests_per_s"] / by[1]["requests_per_s"]
    tail = by[16]["p95_s"] / by[1]["p50_s"]
    cost = server16 / raw16 - 1
    report = {
        "benchmark": "serve_load",
        "checkpoint": "agentkit-tiny",
        "threads": args.threads,
        "device": args.device,
        "cpus": os.cpu_count(),
        "levels": levels,
        "server_16_wall_s": server16,
        "raw_generate_16_wall_s": round(raw16, 3),
        "targets": [
            target("requests_per_s_c16_over_c1", round(speedup, 3), 2.0, True),
            target("p95_c16_over_p50_c1", round(tail, 3), 3.0, False),
            target("parse_and_validate_rate", valid / calls if calls else None, 1.0, True),
            target("server_cost_over_batched_generate", round(cost, 3), 0.10, False),
        ],
    }
    if not args.json:
        for lv in levels:
            print(
                f"concurrency {lv['concurrency']:>2}: {lv['requests_per_s']:.2f} req/s, p50 {lv['p50_s']:.2f} s, "
                f"p95 {lv['p95_s']:.2f} s ({lv['valid_calls']}/{lv['tool_calls']} calls valid)"
            )
        print(f"16 requests: server {server16:.2f} s, batched generate {raw16:.2f} s")
    emit(report, args.json)


if __name__ == "__main__":
    main()
