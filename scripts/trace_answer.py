"""Show how a bot's answer turn is denoised: the tokens accepted at each denoising step of the model turn that
follows the first tool response.

    .venv/bin/python scripts/trace_answer.py examples/code_search/bundle.yaml "Where is the class CanvasBatcher defined?"

Runs the bundle's agent on the embedded backend (the code-search tools read this repository), then replays the
turn after the first tool response with ``on_event`` and prints, per denoising step, each canvas position accepted
for the first time with its token and entropy (nats). Positions accepted while a position left of them is still
undecided are where copied spans skip or repeat a token (docs/TRAINING.md, "Experiment 2026-12-02").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("question")
    ap.add_argument("--model", default=None, help="checkpoint folder (default: the embedded agentkit-tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40, help="denoising steps to print")
    a = ap.parse_args()

    import torch

    from agentkit.backends.embedded import EmbeddedBackend
    from agentkit.bundle import load_bundle
    from agentkit.messages import to_template_messages
    from model.runtime import StepEvent
    from tools import code_search

    torch.set_num_threads(1)
    code_search.set_root(ROOT)
    backend = EmbeddedBackend(a.model, seed=a.seed, threads=1)
    agent = load_bundle(a.bundle).make_agent(backend=backend)
    result = agent.run(a.question)
    print("call:  ", [(c.name, c.arguments) for c in result.tool_calls][:1])
    print("answer:", repr(result.answer))
    tool_at = next((i for i, m in enumerate(result.messages) if m.get("role") == "tool"), None)
    if tool_at is None:
        print("no tool response: nothing to trace")
        return
    steps: list[tuple[int, list[int], list[bool], list[float]]] = []

    def on_event(e: object) -> None:
        if isinstance(e, StepEvent):
            steps.append((e.step, e.argmax[0].tolist(), e.accepted[0].tolist(), e.entropy[0].tolist()))

    cm = backend.chat_model
    messages = to_template_messages(result.messages[: tool_at + 1])
    out = cm.chat(messages, tools=agent.declarations(), seed=a.seed, on_event=on_event)
    print("replay:", repr(out.text))
    seen: set[int] = set()
    for step, argmax, accepted, entropy in steps[: a.steps]:
        new = [i for i, ok in enumerate(accepted) if ok and i not in seen]
        seen.update(new)
        pieces = " ".join(
            f"{i}:{cm.tokenizer.convert_ids_to_tokens(argmax[i])}({entropy[i]:.2f})" for i in new
        )
        print(f"step {step:2d}  {pieces}")


if __name__ == "__main__":
    main()
