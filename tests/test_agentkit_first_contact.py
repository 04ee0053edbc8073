"""First contact (issue 18): what a new user meets on the command line - seeds, failed runs that show their
last steps, chat commands, empty prompts, a readable ``generate``, BFCL data in the repository, hub ids
that are not cached. Offline, CPU."""

import json
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from agentkit.bundle import load_bundle
from agentkit.cli import app

ROOT = pathlib.Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture
def calc_bundle(tmp_path, tools_module):
    mod = tools_module(
        "fc_tools",
        '''
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b
        ''',
    )
    p = tmp_path / "calc.yaml"
    p.write_text(
        f"agentkit_bundle: 1\nname: calc\nmodel: {{backend: scripted, name: script.json}}\n"
        f"tools:\n  - {{name: add, python: '{mod}:add'}}\n"
    )
    return p


# ------------------------------------------------------------------------------------------------ seeds


def test_seed_from_bundle_cli_and_examples(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("agentkit_bundle: 1\nname: s\nmodel: {backend: embedded, seed: 7}\ntools: []\n")
    b = load_bundle(p)
    assert b.make_backend().seed == 7
    assert b.make_agent(seed=3).backend.seed == 3  # --seed overrides the bundle
    assert b.make_backend("openai", "m", seed=5).settings["seed"] == 5  # and follows a --backend switch
    # every example bundle on the embedded backend (the README: "a rerun prints the same transcript")
    for example in sorted((ROOT / "examples").glob("*/*.yaml")):
        b = load_bundle(example)
        assert b.model_section.backend == "embedded" and b.make_backend().seed == 0, example


def test_run_with_seed_is_reproducible(tmp_path, tools_module):
    torch = pytest.importorskip("torch")
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    ckpt = make_tiny_checkpoint(tmp_path / "ck", canvas_length=16, generation={"max_denoising_steps": 4})
    mod = tools_module("fc_seed", "def echo(text: str) -> str:\n    '''Echo.'''\n    return text\n")
    p = tmp_path / "b.yaml"
    p.write_text(
        f"agentkit_bundle: 1\nname: b\nmodel: {{name: '{ckpt}', max_new_tokens: 32}}\n"
        "agent: {max_steps: 2, tool_choice: {name: echo}, loop_guard: null}\n"
        f"tools:\n  - {{name: echo, python: '{mod}:echo'}}\n"
    )

    def steps(seed):
        res = runner.invoke(app, ["run", str(p), "Say hi", "--json", "--seed", str(seed)])
        assert res.exit_code in (0, 1), res.output
        data = json.loads(res.stdout)
        data = data.get("result") or data
        return [(s["text"], [(c["name"], c["arguments"]) for c in s["tool_calls"]]) for s in data["steps"]]

    first = steps(11)
    assert first[0][1] and first[0][1][0][0] == "echo"
    assert steps(11) == first
    res = runner.invoke(app, ["run", str(p), "Say hi", "--seed", str(2**63)])
    assert res.exit_code == 2 and "--seed" in res.output


# ------------------------------------------------------------------------------------- failed runs, chat


def test_failed_run_prints_its_last_steps_and_points_to_json(calc_bundle):
    script = calc_bundle.parent / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": i, "b": 40}}]} for i in range(4)])
    )
    res = runner.invoke(app, ["run", str(calc_bundle), "add forever", "--max-steps", "4"])
    assert res.exit_code == 1
    err = res.stderr
    assert "MaxStepsExceeded: no final answer after 4 model turns (max_steps=4)\n" in err
    assert "last 3 of 4 step(s):" in err
    assert 'step 1: add({"a": 1, "b": 40}) -> 41' in err and 'step 3: add({"a": 3, "b": 40}) -> 43' in err
    assert "step 0:" not in err
    assert "run the same command with --json" in err and ".result" not in err


def test_chat_refuses_unknown_commands_and_lists_them(calc_bundle):
    script = calc_bundle.parent / "script.json"
    script.write_text(json.dumps(["Yes, /etc is a folder."]))
    res = runner.invoke(
        app, ["chat", str(calc_bundle)], input="/help\n/reset now\n//etc is a folder?\n/history\n/quit\n"
    )
    assert res.exit_code == 0, res.output
    assert (
        "unknown command '/help'; commands: /exit, /quit, /reset, /history, /save PATH, /image PATH (start a message "
        "with // "
        "to send one that begins with /)"
    ) in res.stderr
    assert "/reset takes no argument" in res.stderr
    # one model turn: only the // message reached the model
    assert res.stdout.count("agent> ") == 1 and "agent> Yes, /etc is a folder." in res.stdout
    assert "user> /etc is a folder?" in res.stdout and "BackendError" not in res.output


def test_ctrl_c_during_a_chat_turn_drops_the_turn_not_the_session(calc_bundle, monkeypatch):
    from agentkit.backends.scripted import ScriptedBackend

    script = calc_bundle.parent / "script.json"
    script.write_text(json.dumps(["Second answer."]))
    real, calls = ScriptedBackend.turn, []

    def interrupted_once(self, request):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the user's Ctrl-C while the first turn runs
        return real(self, request)

    monkeypatch.setattr(ScriptedBackend, "turn", interrupted_once)
    res = runner.invoke(app, ["chat", str(calc_bundle)], input="first?\nsecond?\n/history\n")
    assert res.exit_code == 0, res.output  # it was: the whole chat ended (exit 130, the conversation lost)
    assert "interrupted: the turn was dropped" in res.stderr
    assert "agent> " in res.stdout and "user> first?" not in res.stdout
    assert "user> second?\nassistant> Second answer." in res.stdout


def test_generate_and_run_refuse_an_empty_prompt(calc_bundle):
    for args in (
        ["generate", ""],
        ["generate", "  "],
        ["generate", "", "--raw-prompt"],
        ["run", str(calc_bundle), " "],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, args
        assert "is empty" in res.stderr


# --------------------------------------------------------------------------------------------- generate


def test_generate_prints_a_readable_answer_and_the_raw_canvas_on_request():
    pytest.importorskip("torch")
    args = ["generate", "What is the weather in Paris?", "--threads", "1", "--seed", "0"]
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert set(data) == {"answer", "thinking", "tool_calls", "error", "raw", "stats"}
    readable = runner.invoke(app, args)
    raw = runner.invoke(app, [*args, "--raw-output"])
    assert readable.exit_code == 0 and raw.exit_code == 0
    for control in ("<pad>", "<|tool_call>", "<turn|>", "<eos>"):
        assert control not in readable.stdout and control not in data["answer"]
    assert raw.stdout.startswith(data["raw"] + "\n")  # every token of the canvases, as generated
    assert data["raw"].endswith(("<pad>", "<turn|>", "<eos>", "<|tool_response>"))
    if data["answer"]:
        assert readable.stdout.startswith(data["answer"] + "\n")


def test_readable_answer_shows_calls_and_thinking():
    from agentkit.commands.generate import _readable

    text = '<|channel>thought\nlook it up<channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>'
    out = _readable(text, "")
    assert out == {
        "answer": "",
        "thinking": "look it up",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}],
        "error": None,
    }
    bad = _readable("<|tool_call>call:oops.", "call:oops.")
    assert bad["answer"] == "call:oops." and bad["error"].startswith("malformed tool call:")


# ------------------------------------------------------------------------------------------ BFCL data


def test_bfcl_categories_ship_in_the_repository_with_licence_and_source():
    from evals.bfcl import CATEGORIES, DEFAULT_BFCL_DIR, load_category

    assert DEFAULT_BFCL_DIR.is_relative_to(ROOT / "evals")  # kept apart from the library packages
    assert "Apache License" in (DEFAULT_BFCL_DIR / "LICENSE").read_text()
    assert (DEFAULT_BFCL_DIR / "SOURCE").read_text().split() == [
        "ShishirPatil/gorilla",
        "6ea57973c7a6097fd7c5915698c54c17c5b1b6c8",
    ]
    for category in CATEGORIES:
        questions, answers = load_category(category)
        assert questions and answers is not None and {q["id"] for q in questions} <= set(answers)


def test_eval_bfcl_runs_from_the_shipped_data(tmp_path):
    pytest.importorskip("torch")
    res = runner.invoke(
        app, ["eval", "bfcl", "--category", "parallel", "--limit", "1", "--threads", "1", "--json"]
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert (rep["category"], rep["n"], rep["results"][0]["id"]) == ("parallel", 1, "parallel_0")
    # --data/--answers still read other files, plain or gzipped
    from evals.bfcl import DEFAULT_BFCL_DIR

    q = tmp_path / "q.json.gz"
    shutil.copy(DEFAULT_BFCL_DIR / "BFCL_v4_simple_python.json.gz", q)
    a = tmp_path / "a.json.gz"
    shutil.copy(DEFAULT_BFCL_DIR / "possible_answer" / "BFCL_v4_simple_python.json.gz", a)
    res = runner.invoke(
        app, ["eval", "bfcl", "--data", str(q), "--answers", str(a), "--limit", "1", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["results"][0]["id"] == "simple_python_0"


# ----------------------------------------------------------------------------------------- hub ids


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, and no network: any connection attempt fails the test."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))

    def no_network(*a, **k):
        raise AssertionError("the network was contacted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    return cache


def test_uncached_hub_id_fails_fast_with_path_and_fetch_command(hf_cache):
    pytest.importorskip("torch")
    from transformers import DiffusionGemmaForBlockDiffusion  # noqa: F401  (import time is not lookup time)

    from model.checkpoint.loading import CheckpointError, load_checkpoint

    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint("someorg/not-cached-model")
    assert time.perf_counter() - t0 < 2.0
    msg = str(ei.value)
    assert f"({hf_cache / 'models--someorg--not-cached-model'} does not exist)" in msg
    assert "`hf download someorg/not-cached-model`" in msg
    (hf_cache / "models--someorg--not-cached-model" / "refs").mkdir(parents=True)
    (hf_cache / "models--someorg--not-cached-model" / "refs" / "main").write_text("0" * 40)
    with pytest.raises(CheckpointError, match="has no complete snapshot"):
        load_checkpoint("someorg/not-cached-model")
    res = runner.invoke(app, ["generate", "hi", "--model", "someorg/not-cached-model"])
    assert res.exit_code == 2 and "hf download someorg/not-cached-model" in res.output
    bundle = str(ROOT / "examples" / "code_search" / "bundle.yaml")
    for cmd in (["run", bundle, "hi"], ["chat", bundle]):  # the same exit code everywhere, before any REPL
        res = runner.invoke(app, [*cmd, "--model", "someorg/not-cached-model"], input="hello\n")
        assert res.exit_code == 2 and "hf download someorg/not-cached-model" in res.output, res.output


def test_unknown_device_is_a_one_line_error_before_loading():
    pytest.importorskip("torch")
    from model.checkpoint.loading import CheckpointError, load_checkpoint

    for bad in ("gpu", "cuda0", "CPU", "cuda:x"):
        with pytest.raises(
            CheckpointError, match=f"unsupported device '{bad}': choose 'cpu', 'cuda' or 'cuda:N'"
        ):
            load_checkpoint(device=bad)
    res = runner.invoke(app, ["generate", "hi", "--device", "gpu", "--threads", "1"])
    assert res.exit_code == 2, res.output
    assert "unsupported device 'gpu'" in res.output and "Traceback" not in res.output


def test_cached_hub_id_loads_from_the_cache_without_network(hf_cache, tmp_path):
    torch = pytest.importorskip("torch")
    from model.checkpoint.loading import load_checkpoint
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    commit = "a" * 40
    snap = hf_cache / "models--someorg--tiny" / "snapshots" / commit
    make_tiny_checkpoint(snap)
    (hf_cache / "models--someorg--tiny" / "refs").mkdir()
    (hf_cache / "models--someorg--tiny" / "refs" / "main").write_text(commit)
    ck = load_checkpoint("someorg/tiny")
    assert ck.source == str(snap) and ck.model.config.model_type == "diffusion_gemma"


# ---------------------------------------------------------------------------------------------- threads


def test_default_threads_leave_a_busy_core_alone(monkeypatch):
    from model.threads import ENV_VAR, default_threads

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [default_threads(n) for n in (1, 2, 3, 4, 6, 8, 16, 64)] == [1, 1, 1, 2, 3, 4, 4, 4]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # torch's own variable is honoured
    assert default_threads(8) == 2
    monkeypatch.setenv(ENV_VAR, "3")  # and agentkit's wins over it
    assert default_threads(2) == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(ValueError, match=f"AGENTKIT_THREADS must be an integer >= 1, got '{bad}'"):
            default_threads()


def test_thread_counts_past_the_cap_are_refused_where_given(monkeypatch, tmp_path):
    """100,000 threads crashed the checkpoint load ('does not match the DiffusionGemma architecture (can't start
    new thread)') and then segfaulted; each way of asking for them is now refused, naming the cap."""
    from agentkit.backends.embedded import EmbeddedBackend
    from agentkit.errors import BundleError
    from model.threads import ENV_VAR, MAX_THREADS, apply_threads, default_threads

    assert MAX_THREADS == 1024
    monkeypatch.setenv(ENV_VAR, "100000")
    with pytest.raises(ValueError, match="AGENTKIT_THREADS must be at most 1024, got '100000'"):
        default_threads()
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")  # torch's variable: named, not a bare "threads" count
    with pytest.raises(
        ValueError, match=r"\$OMP_NUM_THREADS must be at most 1024 for agentkit, got '100000'"
    ):
        default_threads()
    monkeypatch.delenv("OMP_NUM_THREADS")
    with pytest.raises(ValueError, match="threads must be from 1 to 1024, got 100000"):
        apply_threads(100000)
    with pytest.raises(ValueError, match="threads must be at most 1024, got 100000"):
        EmbeddedBackend(threads=100000)
    assert EmbeddedBackend(threads=1024).threads == 1024
    p = tmp_path / "b.yaml"
    p.write_text("agentkit_bundle: 1\nname: b\nmodel:\n  threads: 100000\ntools: []\n")
    with pytest.raises(BundleError) as info:
        load_bundle(p)
    (issue,) = info.value.issues
    assert (issue.line, issue.field) == (4, "model.threads")
    assert "100000 is greater than the maximum of 1024" in issue.message
    bundle = str(ROOT / "examples" / "code_search" / "bundle.yaml")
    for cmd in (
        ["run", bundle, "hi"],
        ["generate", "hi"],
        ["specialize", bundle, "--out", str(tmp_path / "o")],
    ):
        res = runner.invoke(app, [*cmd, "--threads", "100000"])
        assert res.exit_code == 2 and "--threads" in res.output and "1024" in res.output, (cmd, res.output)


def test_threads_option_on_every_model_command(monkeypatch, tmp_path, tools_module):
    from model.threads import ENV_VAR

    bundle = str(ROOT / "examples" / "code_search" / "bundle.yaml")
    evals = (["eval", "bfcl", "-n", "1"], ["eval", "heldout", "-n", "1"])
    for cmd in (["run", bundle, "hi"], ["chat", bundle], ["generate", "hi"], ["serve"], *evals):
        res = runner.invoke(app, [*cmd, "--help"])
        assert res.exit_code == 0 and "--threads" in res.output, cmd
        res = runner.invoke(app, [*cmd, "--threads", "0"])
        assert res.exit_code == 2 and "--threads" in res.output, cmd
    # a bad $AGENTKIT_THREADS is one line and exit 2, before any model loads
    monkeypatch.setenv(ENV_VAR, "many")
    for cmd in (
        ["generate", "hi"],
        ["serve", "--port", "0"],
        ["run", bundle, "hi"],
        ["chat", bundle],
        *evals,
    ):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 2, (cmd, res.output)
        assert "$AGENTKIT_THREADS must be an integer >= 1, got 'many'" in res.output
    for cmd in evals:  # a bad --binding is refused before the checkpoint loads
        res = runner.invoke(app, [*cmd, "--binding", "rules"])
        assert res.exit_code == 2 and "--binding must be auto, copy-head or none, got 'rules'" in res.output

    torch = pytest.importorskip("torch")
    from model.testing import make_tiny_checkpoint

    monkeypatch.delenv(ENV_VAR)
    ckpt = make_tiny_checkpoint(tmp_path / "ck", canvas_length=16, generation={"max_denoising_steps": 4})
    mod = tools_module("fc_threads", "def echo(text: str) -> str:\n    '''Echo.'''\n    return text\n")
    p = tmp_path / "b.yaml"
    p.write_text(
        f"agentkit_bundle: 1\nname: b\nmodel: {{name: '{ckpt}', max_new_tokens: 16, threads: 2}}\n"
        f"agent: {{max_steps: 1}}\ntools:\n  - {{name: echo, python: '{mod}:echo'}}\n"
    )
    try:
        torch.set_num_threads(1)
        res = runner.invoke(app, ["run", str(p), "Say hi", "--json"])  # the bundle's model.threads
        assert res.exit_code in (0, 1, 3), res.output
        assert torch.get_num_threads() == 2
        res = runner.invoke(
            app, ["run", str(p), "Say hi", "--json", "--threads", "1"]
        )  # --threads overrides it
        assert res.exit_code in (0, 1, 3), res.output
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)


def test_help_bundle_validation_and_non_embedded_runs_do_not_import_torch(tmp_path):
    script = tmp_path / "script.json"
    script.write_text('["Hello."]')
    code = f"""
import sys
from typer.testing import CliRunner
from agentkit.cli import app
from agentkit.bundle import load_bundle
for args in (["--help"], ["run", "--help"], ["chat", "--help"], ["generate", "--help"], ["serve", "--help"]):
    assert CliRunner().invoke(app, args).exit_code == 0, args
for b in ("code_search/bundle.yaml", "weather/bundle.yaml", "weather/offline.yaml"):
    load_bundle("examples/" + b)
run = ["run", "examples/code_search/bundle.yaml", "hi", "--backend", "scripted", "--model", {str(script)!r}]
res = CliRunner().invoke(app, run)
assert res.exit_code == 0 and "Hello." in res.output, res.output
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout == "[]\n", out.stderr
