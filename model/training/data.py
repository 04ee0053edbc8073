"""Synthetic function-calling dialogues: a prompt (OpenAI-style ``messages`` + ``tools``) and the target model
turn as the Gemma 4 chat template writes it (``<|tool_call>call:NAME{...}<tool_call|><|tool_response>`` or
``Some answer<turn|>``). Tools come from the Glaive schemas of MaskBench, hand-written domain tables and the
example bots; requests from hand-written templates (no BFCL data). Deterministic per ``(seed, split)``; the
``heldout`` split has its own stream and a disjoint tenth of the Glaive schemas.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grammar import special_tokens as st
from model.training import values as V
from model.training.bots import bot_answer, bot_example_parts, bot_response, say
from model.training.catalog import (
    DEFAULT_MASKBENCH,
    TrainingTool,
    bot_tools,
    generated_tool,
    load_glaive_tools,
    split_of,
)
from model.training.kinds import OPENERS, SYSTEM_PROMPTS, Kind
from model.training.render import render_prompt, strip_descriptions
from model.training.tables import frozen, load
from model.turn.declarations import format_call

#: The words of the dialogues (``tables/dialogue.json``): mention and answer templates, small talk, endings.
DIALOGUE: dict[str, Any] = frozen(load("dialogue"))


@dataclass
class Example:
    """One training example: prompt ``messages`` and ``tools`` (OpenAI-style), the ``target`` model turn (ending
    in ``<|tool_response>`` or ``<turn|>``), its ``kind`` (a :data:`KIND_WEIGHTS` name), the expected ``calls``
    ``[(name, arguments)]`` and ``bindings`` ``[(tool, parameter, spoken)]``: the words of the last user message
    that state each argument (``"five"`` for ``days=5``), labels of the binding supervision."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    target: str
    kind: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    bindings: list[tuple[str, str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable dict (``calls`` as ``[{"name", "arguments"}]``)."""
        return {
            "messages": self.messages,
            "tools": self.tools,
            "target": self.target,
            "kind": self.kind,
            "calls": [{"name": n, "arguments": a} for n, a in self.calls],
        }


def copy_drill(ex: Example) -> Example | None:
    """The copy-drill form of a single-turn call example (no system prompt, only the called tools, terse
    declarations), or None for other examples."""
    if not ex.calls or len(ex.messages) - (ex.messages[0]["role"] == "system") != 1:
        return None
    called = {n for n, _ in ex.calls}
    tools = strip_descriptions([t for t in ex.tools if t.get("function", t)["name"] in called])
    msgs = [m for m in ex.messages if m["role"] != "system"]
    return Example(msgs, tools, ex.target, ex.kind, list(ex.calls), list(ex.bindings))


def _param_phrase(rng: random.Random, pname: str, kind: Kind, spoken: str, schema: dict[str, Any]) -> str:
    n = V.natural(pname)
    if rng.random() < 0.15 and schema.get("description"):
        d = schema["description"].rstrip(".")
        n = d[0].lower() + d[1:]
        if n.startswith("the "):
            n = n[4:]
        if len(n) > 40:
            n = V.natural(pname)
    tmpl = rng.choice(kind.mentions)
    if schema.get("type") == "boolean":
        tmpl = rng.choice(DIALOGUE["BOOL_ON" if spoken == "yes" else "BOOL_OFF"])
    return tmpl.format(n=n, v=spoken)


def _draw_args(
    rng: random.Random, tool: TrainingTool, optional_p: float = 0.45
) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """Argument values, their mention phrases and each one's spoken value (optional ones with ``optional_p``)."""
    props = tool.parameters["properties"]
    required = set(tool.parameters.get("required", []))
    if not required and props:
        required = {rng.choice(sorted(props))}
    args: dict[str, Any] = {}
    phrases: list[str] = []
    spoken_out: dict[str, str] = {}
    for pname, schema in props.items():
        if pname not in required and rng.random() >= optional_p:
            continue
        if tool.name == "get_forecast" and pname == "date" and "days" in args:
            continue
        kind = tool.kinds[pname]
        value, spoken = kind.gen(rng)
        if (
            pname == "end_line"
            and "start_line" in args
            and isinstance(value, int)
            and value <= args["start_line"]
        ):
            value = args["start_line"] + rng.randint(5, 80)
            spoken = str(value)
        args[pname] = value
        spoken_out[pname] = str(spoken)
        phrases.append(_param_phrase(rng, pname, kind, spoken, schema))
    return args, phrases, spoken_out


def _join(rng: random.Random, phrases: list[str]) -> str:
    if not phrases:
        return ""
    if len(phrases) == 1:
        return phrases[0]
    sep = rng.choice((", ", " ", ", ", "; "))
    if rng.random() < 0.5:
        return sep.join(phrases[:-1]) + " and " + phrases[-1]
    return sep.join(phrases)


def _request(rng: random.Random, tool: TrainingTool, args_phrases: list[str]) -> str:
    """One natural-language request for ``tool`` mentioning each argument phrase."""
    phrases = list(args_phrases)
    if rng.random() < 0.3:
        rng.shuffle(phrases)
    body = _join(rng, phrases)
    action = tool.action
    opener = rng.choice(OPENERS)
    r = rng.random()
    if r < 0.6:
        text = f"{opener}{action} {body}".strip()
    elif r < 0.75:
        text = f"{body}: {action}" if body else action  # values first: never re-case them
    elif r < 0.9:
        text = f"{opener}{action}" + (f". Use {body}" if body else "")
    else:
        text = f"I'm looking to {action} {body}".strip()
    if not (r >= 0.6 and r < 0.75 and body) and not (not opener and text.startswith(body) and body):
        text = text[0].upper() + text[1:]
    if opener in ("Can you ", "Could you ", "Would you ") or text.startswith(("Can", "Could", "Would")):
        return text + "?"
    return text + rng.choice(DIALOGUE["ENDINGS"])


def _response_for(rng: random.Random, tool: TrainingTool, args: dict[str, Any]) -> dict[str, Any]:
    if tool.domain in ("bot_weather", "bot_code"):
        try:
            return bot_response(rng, tool.name, args)
        except KeyError:  # another tool of the same name (a Glaive schema): a generic response below
            pass
    if tool.domain == "bot_weather":
        if tool.name == "geocode":
            return {"lat": round(rng.uniform(-80, 80), 4), "lon": round(rng.uniform(-170, 170), 4)}
        return {
            "temperature": rng.randint(-10, 38),
            "condition": rng.choice(("sunny", "cloudy", "rain", "snow", "windy")),
        }
    if tool.domain == "bot_code":
        if tool.name == "read_file":
            return {"text": f"def {V.identifier(rng)}():\n    return {rng.randint(0, 9)}"}
        return {"matches": [f"{V.file_path(rng)}:{rng.randint(1, 400)}" for _ in range(rng.randint(1, 3))]}
    out: dict[str, Any] = {}
    for k in rng.sample(DIALOGUE["RESPONSE_KEYS"], rng.randint(1, 2)):
        r = rng.random()
        if r < 0.4:
            out[k] = rng.randint(0, 5000)
        elif r < 0.6:
            out[k] = round(rng.uniform(0, 999), 2)
        else:
            out[k] = rng.choice(("ok", "done", "pending", "confirmed", V.phrase(rng), rng.choice(V.CITIES)))
    return out


def _answer_from(rng: random.Random, responses: list[tuple[str, dict[str, Any]]]) -> str:
    bits = []
    for _name, resp in responses:
        for k, v in resp.items():
            if isinstance(v, list):
                v = ", ".join(map(str, v))
            bits.append(say(rng, DIALOGUE, "ANSWER_PARTS", k=V.natural(k), v=v))
    body = "; ".join(bits) if rng.random() < 0.5 else ", ".join(bits)
    pre = rng.choice(DIALOGUE["ANSWER_LEADS"])
    s = pre + body
    return s[0].upper() + s[1:] + "."


#: Small talk: (message, possible answers), no tool needed.
SMALLTALK: tuple[tuple[str, tuple[str, ...]], ...] = DIALOGUE["SMALLTALK"]


def _no_tool(rng: random.Random) -> tuple[str, str]:
    r = rng.random()
    if r < 0.4:
        q, answers = rng.choice(SMALLTALK)
        return q, rng.choice(answers)
    if r < 0.8:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op, word, res = rng.choice((("+", "plus", a + b), ("-", "minus", a - b), ("*", "times", a * b)))
        q = say(rng, DIALOGUE, "ARITHMETIC_QUESTIONS", a=a, b=b, op=op, word=word)
        return q, say(rng, DIALOGUE, "ARITHMETIC_ANSWERS", a=a, b=b, word=word, res=res)
    c = rng.choice(V.CITIES)
    if rng.random() < 0.5:
        return f"How many letters are in {c}?", f"{c} has {len(c.replace(' ', ''))} letters."
    return f"Write {c} in upper case.", c.upper()


KIND_WEIGHTS = (
    ("call", 0.44),
    ("parallel", 0.08),
    ("multi_call", 0.05),
    ("answer_after_tool", 0.11),
    ("followup_call", 0.05),
    ("no_tool", 0.06),
    ("unanswerable", 0.05),
    ("bot_call", 0.08),
    ("bot_answer", 0.08),
)


#: Kinds whose target is a prose answer with no call although tools may be offered (declining).
DECLINE_KINDS = ("no_tool", "unanswerable")


def _kind_weights(
    bot_share: float | None, decline_share: float | None = None
) -> tuple[tuple[str, float], ...]:
    """:data:`KIND_WEIGHTS` with the ``bot_*`` kinds scaled to ``bot_share`` and :data:`DECLINE_KINDS` to
    ``decline_share`` (``None``: as they are); the other kinds share the rest in proportion."""
    fixed: dict[str | None, float] = {
        g: share for g, share in (("bot", bot_share), ("decline", decline_share)) if share is not None
    }
    if not fixed:
        return KIND_WEIGHTS

    def group(k: str) -> str | None:
        g = "bot" if k.startswith("bot_") else "decline" if k in DECLINE_KINDS else None
        return g if g in fixed else None

    totals = {g: sum(w for k, w in KIND_WEIGHTS if group(k) == g) for g in (*fixed, None)}
    share = {**fixed, None: 1.0 - sum(fixed.values())}
    return tuple((k, w * share[group(k)] / totals[group(k)]) for k, w in KIND_WEIGHTS)


class Generator:
    """Deterministic stream of :class:`Example` s per ``(seed, split)`` (``"train"`` or ``"heldout"``);
    ``maskbench``: the Glaive schemas (missing: none); ``bot_share``/``decline_share``: see :func:`_kind_weights`
    (defaults 16% and 11%); ``paired_declines``: each request for another tool's job is followed by the same
    request with its tool offered among the same others, called (a contrast pair).

    Raises:
        ValueError: for an unknown split, or a share outside its range.
    """

    paired_declines = False
    _twin: Example | None = None  # the call that pairs the decline just drawn (``paired_declines``)

    def __init__(
        self,
        seed: int = 0,
        split: str = "train",
        maskbench: Path = DEFAULT_MASKBENCH,
        bot_share: float | None = None,
        decline_share: float | None = None,
        paired_declines: bool = False,
    ) -> None:
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        if bot_share is not None and not 0.0 <= bot_share < 1.0:
            raise ValueError(f"bot_share must be in [0, 1), got {bot_share}")
        if decline_share is not None and not 0.0 <= decline_share < 1.0 - (bot_share or 0.0):
            raise ValueError(f"decline_share must be in [0, 1 - bot_share), got {decline_share}")
        self.weights = _kind_weights(bot_share, decline_share)
        self.rng = random.Random(f"{seed}:{split}")
        self.glaive = [t for t in load_glaive_tools(maskbench) if split_of(t.name) == split]
        self.bots = bot_tools()
        self.paired_declines = paired_declines

    def tool(self) -> TrainingTool:
        """Draw one tool: 40% Glaive, 45% generated, 15% bot tools."""
        r = self.rng.random()
        if r < 0.4 and self.glaive:
            return self.rng.choice(self.glaive)
        if r < 0.85:
            return generated_tool(self.rng)
        return self.rng.choice(self.bots)

    def _toolset(self, main: list[TrainingTool], extra_max: int = 3) -> list[TrainingTool]:
        names = {t.name for t in main}
        out = list(main)
        for _ in range(self.rng.choice((0, 0, 0, 1, 1, 1, 2, extra_max))):
            t = self.tool()
            if t.name not in names:
                names.add(t.name)
                out.append(t)
        if self.rng.random() < 0.12:
            bot = self.rng.choice(("bot_weather", "bot_code"))
            for t in self.bots:
                if t.domain == bot and t.name not in names:
                    names.add(t.name)
                    out.append(t)
        self.rng.shuffle(out)
        return out

    def _system(self) -> list[dict[str, Any]]:
        if self.rng.random() < 0.5:
            return [{"role": "system", "content": self.rng.choice(SYSTEM_PROMPTS)}]
        return []

    @staticmethod
    def _tool_calls_msg(calls: list[tuple[str, dict[str, Any]]], ids: list[str]) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for (n, a), i in zip(calls, ids, strict=True)
            ],
        }

    def _tool_msgs(
        self, calls: list[tuple[str, dict[str, Any]]], ids: list[str], responses: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        out = []
        for (n, _), i, resp in zip(calls, ids, responses, strict=True):
            content: Any = resp if self.rng.random() < 0.5 else json.dumps(resp)
            out.append({"role": "tool", "tool_call_id": i, "name": n, "content": content})
        return out

    def example(self) -> Example:
        """Draw one example (kind chosen by :data:`KIND_WEIGHTS`, or the ``bot_share`` reweighting)."""
        if self._twin is not None:
            twin, self._twin = self._twin, None
            return twin
        rng = self.rng
        r, acc, kind = rng.random(), 0.0, "call"
        for k, w in self.weights:
            acc += w
            if r < acc:
                kind = k
                break
        return getattr(self, "_ex_" + kind)()  # one _ex_<kind> method per kind name

    def _calls_target(self, calls: list[tuple[str, dict[str, Any]]]) -> str:
        return "".join(format_call(n, a) for n, a in calls) + st.TOOL_RESPONSE_START

    def _call(
        self, kind: str, msgs: list[dict[str, Any]], tools: list[TrainingTool], calls: Any, binds: Any
    ) -> Example:
        """An example whose target is ``calls``, ``tools`` declared."""
        return Example(msgs, [t.openai() for t in tools], self._calls_target(calls), kind, calls, binds)

    def _ex_call(self) -> Example:
        tool = self.tool()
        args, phrases, spoken = _draw_args(self.rng, tool)
        req = _request(self.rng, tool, phrases)
        tools = self._toolset([tool])
        msgs = [*self._system(), {"role": "user", "content": req}]
        return self._call(
            "call", msgs, tools, [(tool.name, args)], [(tool.name, k, v) for k, v in spoken.items()]
        )

    def _ex_parallel(self) -> Example:
        rng = self.rng
        for _ in range(20):
            tool = self.tool()
            props = tool.parameters["properties"]
            strs = [
                k
                for k, s in props.items()
                if s.get("type") in ("string", "integer", "number") and "enum" not in s
            ]
            if strs:
                break
        else:
            return self._ex_call()
        args, _, spoken_args = _draw_args(rng, tool, optional_p=0.3)
        vary = rng.choice([k for k in strs if k in args] or strs)
        kind = tool.kinds[vary]
        k = rng.choice((2, 2, 3, 3, 4))
        vals: list[tuple[Any, str]] = []
        while len(vals) < k:
            v = kind.gen(rng)
            if any(v[0] == x[0] for x in vals):
                break
            vals.append(v)
        if len(vals) < 2:
            return self._ex_call()
        calls = [
            (tool.name, {p: v if p == vary else args[p] for p in props if p in args or p == vary})
            for v, _ in vals
        ]
        spoken = [s for _, s in vals]
        listed = V.and_list(spoken)
        other = [
            _param_phrase(
                rng,
                p,
                tool.kinds[p],
                str(args[p]) if not isinstance(args[p], bool) else ("yes" if args[p] else "no"),
                props[p],
            )
            for p in args
            if p != vary and not isinstance(args[p], list)
        ]
        n = V.natural(vary)
        each = say(rng, DIALOGUE, "PARALLEL", n=n, listed=listed)
        text = f"{rng.choice(OPENERS)}{tool.action} {each}" + (f", {_join(rng, other)}" if other else "")
        text = text[0].upper() + text[1:] + "."
        tools = self._toolset([tool])
        msgs = [*self._system(), {"role": "user", "content": text}]
        binds = [(tool.name, vary, sp) for sp in spoken]
        binds += [(tool.name, p, spoken_args[p]) for p in args if p != vary and p in spoken_args]
        return self._call("parallel", msgs, tools, calls, binds)

    def _ex_multi_call(self) -> Example:
        rng = self.rng
        t1 = self.tool()
        t2 = self.tool()
        if t2.name == t1.name:
            return self._ex_call()
        reqs, calls, binds = [], [], []
        for t in (t1, t2):
            args, phrases, spoken = _draw_args(rng, t)
            reqs.append(_request(rng, t, phrases).rstrip(".!?"))
            calls.append((t.name, args))
            binds += [(t.name, k, v) for k, v in spoken.items()]
        joiner = rng.choice(DIALOGUE["JOINERS"])
        second = reqs[1][0].lower() + reqs[1][1:] if joiner[-2] != "." else reqs[1]
        text = reqs[0] + joiner + second + "."
        tools = self._toolset([t1, t2], extra_max=2)
        msgs = [*self._system(), {"role": "user", "content": text}]
        return self._call("multi_call", msgs, tools, calls, binds)

    def _ex_answer_after_tool(self) -> Example:
        base = self._ex_call() if self.rng.random() < 0.75 else self._ex_parallel()
        ids = [f"call_{self.rng.randint(0, 10**6)}" for _ in base.calls]
        responses = [_response_for(self.rng, self._spec_for(n), a) for n, a in base.calls]
        msgs = [
            *base.messages,
            self._tool_calls_msg(base.calls, ids),
            *self._tool_msgs(base.calls, ids, responses),
        ]
        bot_names = {t.name for t in self.bots}
        if any(n in bot_names for n, _ in base.calls):
            parts = []
            for (n, a), r in zip(base.calls, responses, strict=True):
                try:
                    parts.append(bot_answer(self.rng, n, a, r) if n in bot_names else "")
                except (KeyError, TypeError, IndexError):  # same name, another tool's response
                    parts.append("")
                if not parts[-1]:
                    parts[-1] = _answer_from(self.rng, [(n, r)])
            answer = " ".join(parts)
        else:
            answer = _answer_from(self.rng, [(n, r) for (n, _), r in zip(base.calls, responses, strict=True)])
        return Example(msgs, base.tools, answer + st.TURN_END, "answer_after_tool", [])

    def _spec_for(self, name: str) -> TrainingTool:
        return next((t for t in self.bots if t.name == name), TrainingTool(name, "", {}, {}, "", "other"))

    def _ex_followup_call(self) -> Example:
        first = self._ex_answer_after_tool()
        nxt = self._ex_call()
        declared = {x["function"]["name"]: x for x in first.tools}
        called = nxt.calls[0][0]
        if called in declared and declared[called] != next(
            t for t in nxt.tools if t["function"]["name"] == called
        ):
            return nxt  # two different tools share the name: keep the plain call
        tools = first.tools + [t for t in nxt.tools if t["function"]["name"] not in declared]
        msgs = [
            *first.messages,
            {"role": "assistant", "content": first.target[: -len(st.TURN_END)]},
            nxt.messages[-1],
        ]
        if len(tools) > 6:
            keep = {called} | {m["name"] for m in first.messages if m["role"] == "tool"}
            tools = [t for t in tools if t["function"]["name"] in keep] + [
                t for t in tools if t["function"]["name"] not in keep
            ][:2]
        return Example(msgs, tools, nxt.target, "followup_call", nxt.calls, nxt.bindings)

    def _bot_parts(self) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
        """``(bot exchange, messages, tools, calls)``: the bundle's system prompt (70%), its tools in order (80%)."""
        rng = self.rng
        parts = bot_example_parts(rng)
        tools = list(parts["tools"])
        if rng.random() >= 0.8:
            tools = [t.openai() for t in self._toolset([])] + tools
            rng.shuffle(tools)
            # the catalogue holds the bots' own tools too: each name once
            unique: dict[str, dict[str, Any]] = {}
            for t in tools:
                unique.setdefault(t["function"]["name"], t)
            tools = list(unique.values())
        system = parts["system_prompt"] if rng.random() < 0.7 else rng.choice(SYSTEM_PROMPTS)
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": parts["question"]}]
        return parts, msgs, tools, [(parts["tool"], parts["arguments"])]

    def _ex_bot_call(self) -> Example:
        parts, msgs, tools, calls = self._bot_parts()
        binds = [(parts["tool"], k, v) for k, v in parts["bindings"]]
        return Example(msgs, tools, self._calls_target(calls), "bot_call", calls, binds)

    def _ex_bot_answer(self) -> Example:
        parts, msgs, tools, calls = self._bot_parts()
        cid = [f"call_{self.rng.randint(0, 10**6)}"]
        msgs = [
            *msgs,
            self._tool_calls_msg(calls, cid),
            {"role": "tool", "tool_call_id": cid[0], "name": parts["tool"], "content": parts["response"]},
        ]
        return Example(msgs, tools, parts["answer"] + st.TURN_END, "bot_answer", [])

    def _ex_no_tool(self) -> Example:
        q, a = _no_tool(self.rng)
        tools = [t.openai() for t in self._toolset([self.tool()])] if self.rng.random() < 0.6 else []
        msgs = [*self._system(), {"role": "user", "content": q}]
        return Example(msgs, tools, a + st.TURN_END, "no_tool", [])

    def _ex_unanswerable(self) -> Example:
        rng = self.rng
        want = self.tool()
        args, phrases, spoken = _draw_args(rng, want)
        req = _request(rng, want, phrases)
        others: list[TrainingTool] = []
        for _ in range(rng.randint(1, 3)):
            t = self.tool()
            if t.domain != want.domain and t.name != want.name and t.name not in {o.name for o in others}:
                others.append(t)
        if not others:
            return self._ex_no_tool()
        names = ", ".join(t.name for t in others)
        answer = say(rng, DIALOGUE, "DECLINE", names=names)
        msgs = [*self._system(), {"role": "user", "content": req}]
        if self.paired_declines:
            offered = list(others)
            offered.insert(rng.randint(0, len(offered)), want)
            binds = [(want.name, k, v) for k, v in spoken.items()]
            self._twin = self._call("call", msgs, offered, [(want.name, args)], binds)
        return Example(msgs, [t.openai() for t in others], answer + st.TURN_END, "unanswerable", [])

    def take(self, n: int) -> list[Example]:
        """The next ``n`` examples of the stream."""
        return [self.example() for _ in range(n)]


def corpus_texts(examples: list[Example]) -> Iterator[str]:
    """Full rendered texts (prompt + target) for tokenizer training."""
    for ex in examples:
        yield render_prompt(ex.messages, ex.tools) + ex.target
