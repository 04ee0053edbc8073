"""``agentkit specialize``: the bundle dialogue generator, LoRA fine-tuning of a random-weight tiny checkpoint
(the adapter saves, loads back and changes the outputs), and every adapter error as one line."""

from __future__ import annotations

import json
import random
import re
import shutil
import warnings
from pathlib import Path

import jsonschema
import pytest
import torch
from typer.testing import CliRunner

from agentkit.cli import app
from agentkit.commands.specialize import bundle_declarations
from model.checkpoint.loading import ADAPTER_INFO, AdapterError, base_fingerprint, load_checkpoint
from model.training.bundle_data import BundleGenerator, pattern_sampler, tool_specs, train_and_heldout

ROOT = Path(__file__).resolve().parents[1]
GREENHOUSE = ROOT / "examples" / "greenhouse" / "bundle.yaml"

TOY = [
    {
        "type": "function",
        "function": {
            "name": "feed_fish",
            "description": "Feed the fish in a tank.",
            "parameters": {
                "type": "object",
                "properties": {
                    "tank": {"type": "string", "pattern": "^T[0-9]{2}$", "description": "Tank label."},
                    "grams": {"type": "integer", "minimum": 1, "maximum": 30},
                    "food": {"anyOf": [{"enum": ["flakes", "pellets"], "type": "string"}, {"type": "null"}]},
                },
                "required": ["tank", "grams"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "log_visit",
            "description": "Log a visit to the aquarium.",
            "parameters": {
                "type": "object",
                "properties": {
                    "visitor_name": {"type": "string", "examples": ["Ada", "Grace"]},
                    "day": {"type": "string", "format": "date"},
                },
                "required": ["visitor_name", "day"],
            },
        },
    },
]


# ----------------------------------------------------------------------------------------------- dialogue data
def test_pattern_sampler_draws_values_its_pattern_accepts():
    for pattern in (r"^[A-H][1-9]$", r"^T[0-9]{2}$", r"^[a-z_]{3,6}-\d+$", r"^x?y+z*$"):
        gen = pattern_sampler(pattern)
        assert gen is not None, pattern
        rng = random.Random(0)
        values = {gen(rng)[0] for _ in range(200)}
        assert all(re.fullmatch(pattern.strip("^$"), v) for v in values), pattern
        assert len(values) > 5
    assert pattern_sampler(r"^(a|b)$") is None and pattern_sampler(r"^[^a]$") is None


def test_every_generated_call_validates_against_its_tool_and_the_heldout_requests_are_new():
    train, held = train_and_heldout(TOY, "You keep an aquarium.", 400, 60, seed=3)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOY}
    kinds = {e.kind for e in train}
    assert {"call", "parallel", "multi_call", "answer_after_tool", "followup_call", "no_tool"} <= kinds
    called = set()
    for ex in train + held:
        assert ex.tools == TOY  # every prompt declares the whole bundle, in order
        assert ex.messages[0] == {"role": "system", "content": "You keep an aquarium."}
        for name, args in ex.calls:
            jsonschema.validate(args, schemas[name])
            called.add(name)
    assert called == {"feed_fish", "log_visit"}
    seen = {e.messages[-1]["content"] for e in train if e.messages[-1]["role"] == "user"}
    assert not {e.messages[-1]["content"] for e in held if e.messages[-1]["role"] == "user"} & seen
    # the same seed and split give the same stream; another split another one
    again = BundleGenerator(TOY, "You keep an aquarium.", 3, "train").take(5)
    assert [e.target for e in again] == [e.target for e in train[:5]]
    assert [e.target for e in held[:5]] != [e.target for e in train[:5]]


def test_parameter_kinds_follow_enum_bounds_format_and_examples():
    specs = {s.name: s for s in tool_specs(TOY)}
    rng = random.Random(1)
    feed, visit = specs["feed_fish"], specs["log_visit"]
    assert feed.action == "feed the fish in a tank"
    assert {feed.kinds["food"].gen(rng)[0] for _ in range(50)} == {"flakes", "pellets"}
    grams = [feed.kinds["grams"].gen(rng)[0] for _ in range(200)]
    assert min(grams) >= 1 and max(grams) <= 30
    days = [visit.kinds["day"].gen(rng)[0] for _ in range(20)]
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", d) for d in days)
    visitors = {visit.kinds["visitor_name"].gen(rng)[0] for _ in range(100)}
    assert {"Ada", "Grace"} <= visitors and len(visitors) > 2  # the examples and names beyond them
    with pytest.raises(ValueError, match=r"tool 'nested', parameter 'spec': objects"):
        tool_specs(
            [{"function": {"name": "nested", "parameters": {"properties": {"spec": {"type": "object"}}}}}]
        )


def test_the_greenhouse_bundle_is_unknown_to_the_base_training_data():
    from model.training.data import Generator

    declarations, system = bundle_declarations(GREENHOUSE)
    names = {d["function"]["name"] for d in declarations}
    assert len(names) == 5 and system
    seen = set()
    gen = Generator(0, "train")
    for _ in range(3000):
        ex = gen.example()
        seen |= {t["function"]["name"] for t in ex.tools}
    assert not names & seen


def test_a_bundle_whose_tools_come_from_mcp_servers_is_specialized_on_them(tmp_path):
    # examples/mcp/notes.yaml declares no tool of its own: they were left out and specialize said "no tools"
    declarations, system = bundle_declarations(ROOT / "examples" / "mcp" / "notes.yaml")
    assert [d["function"]["name"] for d in declarations] == ["add_note", "read_note", "list_notes"]
    assert system
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        'agentkit_bundle: 1\nname: m\ntools: []\ntoolsets:\n  - mcp: {command: python3, args: ["-c", "pass"]}\n'
    )
    r = CliRunner().invoke(app, ["specialize", str(bad), "--out", str(tmp_path / "o")])
    assert (
        r.exit_code == 2
        and "failed to start: MCPError: Connection closed" in r.output
        and "Traceback" not in r.output
    )


# ------------------------------------------------------------------------------------------------ fine-tuning
#: the warnings the `adapter` fixture's specialize run raised
SPECIALIZE_WARNINGS: list[str] = []


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("spec")
    base = make_tiny_checkpoint(
        root / "base", canvas_length=16, copy_head=True, generation={"max_denoising_steps": 4}
    )
    other = make_tiny_checkpoint(
        root / "other", canvas_length=16, seed=5, generation={"max_denoising_steps": 4}
    )
    return root, base, other


@pytest.fixture(scope="module")
def adapter(tiny):
    from evals.heldout import evaluate_examples
    from model.training.specialize import SpecializeConfig, specialize

    root, base, _ = tiny
    cfg = SpecializeConfig(
        bundle="toy",
        out=str(root / "adapter"),
        base=str(base),
        minutes=5,
        lora_rank=4,
        threads=1,
        n_train=48,
        n_eval=3,
        batch_size=4,
        max_prompt=512,
        max_steps=3,
        lr=5e-2,
    )
    lines: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = specialize(cfg, TOY, "You keep an aquarium.", log=lines.append, evaluate=evaluate_examples)
    SPECIALIZE_WARNINGS.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    return root / "adapter", report, lines


def test_specialize_shows_no_deprecation_noise_of_its_libraries(adapter):
    # peft's get_peft_model made transformers warn `is_gradient_checkpointing` is deprecated on every run
    assert not [w for w in SPECIALIZE_WARNINGS if "is_gradient_checkpointing" in w], SPECIALIZE_WARNINGS


def _decoder_logits(ck) -> torch.Tensor:
    ids = torch.tensor([[2, 30, 31, 32, 33, 34]])
    with torch.no_grad():
        enc = ck.model.model.encoder(input_ids=ids)
        canvas = torch.tensor([[40 + i for i in range(16)]])
        return ck.model(cache=enc.cache, decoder_input_ids=canvas).logits


def test_specialize_saves_an_adapter_that_loads_and_changes_the_outputs(tiny, adapter):
    _, base, _ = tiny
    folder, report, lines = adapter
    for name in ("adapter_config.json", "adapter_model.safetensors", ADAPTER_INFO, "report.json"):
        assert (folder / name).is_file(), name
    info = json.loads((folder / ADAPTER_INFO).read_text())
    assert info["base_fingerprint"] == base_fingerprint(base) and info["tools"] == ["feed_fish", "log_visit"]
    assert report["steps"] == 3 and report["threads"] == 1
    assert 0 < report["adapter_bytes"] < report["base_bytes"]
    assert report["held_out_call_dialogues"] >= 1
    assert 0.0 <= report["exact_call_accuracy_before"] <= 1.0
    assert json.loads((folder / "report.json").read_text())["steps"] == 3
    assert any("exact-call accuracy" in line for line in lines)
    plain = load_checkpoint(base)
    tuned = load_checkpoint(base, adapter=folder)
    assert tuned.adapter == str(folder)
    lora = [n for n, _ in tuned.model.named_modules() if n.endswith("lora_A")]
    assert lora and all(n.startswith(("model.decoder.", "copy_head.")) for n in lora)  # never the encoder
    diff = (_decoder_logits(tuned) - _decoder_logits(plain)).abs().max()
    assert float(diff) > 1e-3
    # the frozen encoder is the base's
    for (n, p), (_, q) in zip(
        plain.model.model.encoder.named_parameters(),
        tuned.model.model.encoder.named_parameters(),
        strict=True,
    ):
        assert torch.equal(p, q), n


def test_an_adapter_on_the_wrong_base_names_both(tiny, adapter):
    _, base, other = tiny
    folder, _, _ = adapter
    with pytest.raises(AdapterError) as info:
        load_checkpoint(other, adapter=folder)
    msg = str(info.value)
    assert f"adapter {folder} was trained on base {base}" in msg and str(other) in msg and "\n" not in msg


def test_bad_adapter_folders_are_one_line_errors(tmp_path, tiny):
    _, base, _ = tiny
    with pytest.raises(AdapterError, match="no such folder"):
        load_checkpoint(base, adapter=tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AdapterError, match=r"no adapter_config\.json"):
        load_checkpoint(base, adapter=tmp_path / "empty")
    (tmp_path / "empty" / "adapter_config.json").write_text("{}")
    (tmp_path / "empty" / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(AdapterError, match=f"no {ADAPTER_INFO}"):
        load_checkpoint(base, adapter=tmp_path / "empty")


def test_cli_adapter_option_and_bundle_key(tiny, adapter, tmp_path):
    root, base, _ = tiny
    folder, _, _ = adapter
    shutil.copytree(folder, tmp_path / "lora")
    (tmp_path / "b.yaml").write_text(
        f"agentkit_bundle: 1\nname: b\nmodel: {{backend: embedded, name: {base}, adapter: lora, seed: 0}}\n"
        "agent: {max_steps: 1}\ntools: []\n"
    )
    runner = CliRunner()
    r = runner.invoke(app, ["run", str(tmp_path / "b.yaml"), "hello", "--json"])
    assert r.exit_code in (0, 1), r.output  # the random model may not answer; it must load the adapter
    assert "Traceback" not in r.output
    r = runner.invoke(app, ["run", str(tmp_path / "b.yaml"), "hello", "--adapter", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no such folder" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["generate", "hi", "--model", str(root / "other"), "--adapter", str(folder)])
    assert r.exit_code == 2 and "was trained on base" in r.output
    r = runner.invoke(
        app,
        [
            "run",
            str(tmp_path / "b.yaml"),
            "hi",
            "--backend",
            "openai",
            "--model",
            "m",
            "--adapter",
            str(folder),
        ],
    )
    assert r.exit_code == 2 and "--adapter applies to the embedded backend only" in r.output


def test_cli_specialize_refuses_bad_input_in_one_line(tmp_path):
    runner = CliRunner()
    (tmp_path / "bad.yaml").write_text("agentkit_bundle: 1\nname: [\n")
    r = runner.invoke(app, ["specialize", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "bad.yaml" in r.output and "Traceback" not in r.output
    (tmp_path / "none.yaml").write_text("agentkit_bundle: 1\nname: n\ntools: []\n")
    r = runner.invoke(app, ["specialize", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "declares no tools" in r.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    r = runner.invoke(app, ["specialize", str(GREENHOUSE), "--out", str(tmp_path / "full"), "--eval", "1"])
    assert r.exit_code == 2 and "not an adapter folder" in r.output


def test_cli_specialize_refuses_an_out_it_cannot_create_before_any_work(tmp_path, monkeypatch):
    """--out under a file (or in /proc) failed only when the adapter was saved, after the base evaluation and the
    fine-tuning, as a FileNotFoundError traceback: the trained adapter was lost."""
    import model.training.specialize as sp

    def generated(*a, **k):
        raise AssertionError("data generated before --out was checked")

    monkeypatch.setattr(sp, "train_and_heldout", generated)
    (tmp_path / "f").write_text("a file")
    out = tmp_path / "f" / "adapter"
    r = CliRunner().invoke(app, ["specialize", str(GREENHOUSE), "--out", str(out), "--eval", "1"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"error: {out}: cannot create the --out folder (Not a directory)" in r.output


def test_cli_specialize_checks_the_base_before_it_generates_data(tmp_path, monkeypatch):
    import model.training.specialize as sp

    def generated(*a, **k):
        raise AssertionError("data generated before the base was checked")

    monkeypatch.setattr(sp, "train_and_heldout", generated)  # a bad --base used to fail after it (5 s)
    args = ["specialize", str(GREENHOUSE), "--out", str(tmp_path / "o"), "--base", str(tmp_path / "nope")]
    r = CliRunner().invoke(app, args)
    assert (
        r.exit_code == 2
        and "checkpoint folder does not exist" in r.output
        and str(tmp_path / "nope") in r.output
    )


def test_the_shared_prefix_encoded_once_gives_the_states_of_whole_prompts(tiny):
    from model.training.batches import device_batch, encode_labelled, word_token_table
    from model.training.settings import TrainConfig
    from model.training.specialize import PrefixEncoder, length_batches, shared_prefix

    _, base, _ = tiny
    ck = load_checkpoint(base)
    train, _ = train_and_heldout(TOY, "You keep an aquarium.", 40, 1, seed=0)
    data = encode_labelled(ck.tokenizer, train, word_token_table(ck.tokenizer))
    pe = PrefixEncoder(ck.model, shared_prefix([d.prompt for d in data]))
    assert len(pe.prefix) > 100  # the system prompt and both declarations
    tcfg = TrainConfig(batch_size=6, canvas_length=16, max_prompt=4096, vocab_size=512, copy_head=True)
    items = sorted(data, key=lambda d: len(d.prompt))[::7][:6]  # six different lengths
    batch = device_batch(items, tcfg, random.Random(0), "cpu")
    groups = pe.groups(batch)
    assert len(groups) == len({len(d.prompt) for d in items}) and abs(sum(g[2] for g in groups) - 1) < 1e-9
    for sub, (cache, hidden), _ in groups:
        with torch.no_grad():
            whole = ck.model.model.encoder(input_ids=sub["input_ids"], attention_mask=sub["attention_mask"])
            torch.testing.assert_close(hidden, whole.last_hidden_state, atol=1e-4, rtol=1e-4)
            canvas = sub["canvas"]
            mask = torch.cat([sub["attention_mask"], torch.ones_like(canvas)], 1)
            a = ck.model.model(cache=whole.cache, decoder_input_ids=canvas, decoder_attention_mask=mask)
            b = ck.model.model(
                cache=cache,
                decoder_input_ids=canvas,
                decoder_attention_mask=mask,
                decoder_position_ids=sub["decoder_position_ids"],
            )
        torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=1e-4, rtol=1e-4)
    # batches of one prompt length where the data allows it
    many, _ = train_and_heldout(TOY, "You keep an aquarium.", 400, 1, seed=1)
    encoded = encode_labelled(ck.tokenizer, many, word_token_table(ck.tokenizer))
    buckets: dict[int, int] = {}
    for d in encoded:
        buckets[len(d.prompt)] = buckets.get(len(d.prompt), 0) + 1
    full = sum(n // 4 for n in buckets.values())  # batches of one length the data allows
    stream = length_batches(encoded, 4, random.Random(1))
    one_pass = [next(stream) for _ in range(-(-len(encoded) // 4))]
    assert sum(len({len(d.prompt) for d in b}) == 1 for b in one_pass) >= full > 10
    assert sorted(id(d) for b in one_pass for d in b) == sorted(id(d) for d in encoded)


def test_adapter_files_missing_or_corrupt_are_one_line(tiny, adapter, tmp_path):
    _, base, _ = tiny
    folder, _, _ = adapter
    with pytest.raises(AdapterError, match="is a file; give the adapter's folder"):
        load_checkpoint(base, adapter=folder / "adapter_config.json")
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "adapter_model.safetensors").unlink()
    with pytest.raises(AdapterError, match=r"no adapter_model\.safetensors"):
        load_checkpoint(base, adapter=broken)
    (broken / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(AdapterError, match="cannot be loaded onto") as info:
        load_checkpoint(base, adapter=broken)
    assert "\n" not in str(info.value)


def test_a_malformed_adapter_config_or_mismatched_weights_say_what_is_wrong(tiny, adapter, tmp_path):
    _, base, _ = tiny
    folder, _, _ = adapter
    broken = tmp_path / "badconfig"
    shutil.copytree(folder, broken)
    (broken / "adapter_config.json").write_text("{bad", encoding="utf-8")
    with pytest.raises(AdapterError, match=r"unreadable adapter_config\.json \(Expecting property name"):
        load_checkpoint(base, adapter=broken)
    shutil.copy(folder / "adapter_config.json", broken / "adapter_config.json")
    (broken / ADAPTER_INFO).write_bytes(b"\xff\xfe{}")  # not UTF-8: was a UnicodeDecodeError traceback
    with pytest.raises(AdapterError, match=f"unreadable {ADAPTER_INFO}"):
        load_checkpoint(base, adapter=broken)
    ranked = tmp_path / "rank"
    shutil.copytree(folder, ranked)
    config = json.loads((ranked / "adapter_config.json").read_text(encoding="utf-8"))
    config["r"] *= 2  # the weights on disk keep the trained rank
    (ranked / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(AdapterError, match="cannot be loaded onto") as info:
        load_checkpoint(base, adapter=ranked)
    assert "size mismatch for" in str(info.value) and "\n" not in str(info.value)


def test_a_bundle_whose_requests_all_occur_in_training_says_accuracy_is_not_measured(tiny, tmp_path):
    # a tool without parameters has few requests: 1,000 training dialogues hold them all, so no held-out one is
    # left and the report read "exact-call accuracy 0.000 -> 0.000 (+0.0 points) on 0 held-out call dialogues"
    from evals.heldout import evaluate_examples
    from model.training.specialize import SpecializeConfig, specialize

    _, base, _ = tiny
    ping = {"type": "function", "function": {"name": "ping", "description": "Check the service is up."}}
    ping["function"]["parameters"] = {"type": "object", "properties": {}}
    cfg = SpecializeConfig(
        bundle="ping", out=str(tmp_path / "a"), base=str(base), minutes=5, lora_rank=2, threads=1,
        n_train=1000, n_eval=3, batch_size=4, max_prompt=512, max_steps=1,
    )  # fmt: skip
    lines: list[str] = []
    report = specialize(cfg, [ping], None, log=lines.append, evaluate=evaluate_examples)
    assert report["held_out_call_dialogues"] == 0
    assert any(
        "not measured: none of the 0 held-out dialogues asks for a call (3 asked for: the others' requests are all"
        in line
        for line in lines
    ), lines
    assert not any("0.000 -> 0.000" in line for line in lines)
