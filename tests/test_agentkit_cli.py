"""``agentkit run`` and ``agentkit chat`` with the scripted backend."""

import io
import json
import pathlib
import textwrap

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agentkit.cli import app
from agentkit.events import ToolCallStarted
from agentkit.history import Conversation
from agentkit.render import RichRenderer

runner = CliRunner()


@pytest.fixture
def bundle(tmp_path, tools_module):
    mod = tools_module(
        "cli_tools",
        '''
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        def fail(x: int) -> int:
            """Always fails."""
            raise ValueError(f"bad x={x}")
        ''',
    )
    script = [
        {
            "thinking": "add them",
            "tool_calls": [
                {"name": "add", "arguments": {"a": 2, "b": 40}},
                {"name": "fail", "arguments": {"x": 1}},
            ],
        },
        "The answer is 42.",
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    p = tmp_path / "calc.yaml"
    p.write_text(
        textwrap.dedent(
            f"""\
            agentkit_bundle: 1
            name: calc
            model: {{backend: scripted, name: script.json}}
            agent: {{max_steps: 3}}
            tools:
              - {{name: add, python: "{mod}:add"}}
              - {{name: fail, python: "{mod}:fail"}}
            """
        )
    )
    return p


def test_run_renders_calls_and_answer(bundle):
    res = runner.invoke(app, ["run", str(bundle), "What is 2+40?"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "thinking: add them" in out
    assert "→ add(a=2, b=40)" in out
    assert "← add" in out and ": 42" in out
    assert "✗ fail: ValueError: bad x=1" in out
    assert "The answer is 42." in out
    assert "warning: every tool call failed" not in out  # add succeeded


def test_run_warns_when_every_tool_call_failed(bundle, tmp_path):
    script = tmp_path / "fails.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "fail", "arguments": {"x": 7}}]}, "It is 42."]))
    res = runner.invoke(app, ["run", str(bundle), "What is x?", "--model", str(script)])
    assert res.exit_code == 3, res.output  # the answer rests on no tool response
    out = " ".join(res.stdout.split())  # rich wraps long lines
    assert "It is 42." in out
    assert "warning: every tool call failed (1)" in out
    assert "the last: fail: exception: ValueError: bad x=7" in out
    res = runner.invoke(app, ["run", str(bundle), "What is x?", "--model", str(script), "--json"])
    assert res.exit_code == 3, res.output
    assert json.loads(res.stdout)["answer"] == "It is 42."
    assert "warning: every tool call failed (1): the answer rests on no tool response" in res.stderr


def test_run_without_tool_calls_exits_0(bundle, tmp_path):
    script = tmp_path / "plain.json"
    script.write_text(json.dumps(["Hello."]))
    res = runner.invoke(app, ["run", str(bundle), "Hi", "--model", str(script)])
    assert res.exit_code == 0, res.output
    assert "Hello." in res.stdout and "warning" not in res.stdout


def test_run_json(bundle):
    res = runner.invoke(app, ["run", str(bundle), "What is 2+40?", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["answer"] == "The answer is 42."
    assert data["stop_reason"] == "final_answer"
    calls = data["steps"][0]["tool_calls"]
    assert (calls[0]["name"], calls[0]["content"]) == ("add", "42")
    assert calls[1]["error_kind"] == "exception"
    assert data["conversation"]["messages"][-1] == {"role": "assistant", "content": "The answer is 42."}


def test_run_model_override_and_step_limit(bundle, tmp_path):
    loop = tmp_path / "loop.json"
    loop.write_text(
        json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": i, "b": 1}}]} for i in range(5)])
    )
    res = runner.invoke(app, ["run", str(bundle), "loop", "--model", str(loop), "--max-steps", "2", "--json"])
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["error"]["type"] == "MaxStepsExceeded"
    assert len(data["result"]["steps"]) == 2 and data["result"]["answer"] is None
    res = runner.invoke(app, ["run", str(bundle), "loop", "--model", str(loop), "--max-steps", "2"])
    assert res.exit_code == 1
    assert "MaxStepsExceeded: no final answer after 2 model turns" in res.stderr


def test_run_bad_bundle_exits_2_with_file_line_field(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("agentkit_bundle: 1\nname: x\ntools:\n  - name: t\n    python: mod:fn\n    timeout: -1\n")
    res = runner.invoke(app, ["run", str(p), "q"])
    assert res.exit_code == 2
    assert f"{p}:6:14: tools[0].timeout: -1 is less than or equal to the minimum of 0" in res.stderr


def test_run_unknown_backend(bundle):
    res = runner.invoke(app, ["run", str(bundle), "q", "--backend", "nope"])
    assert res.exit_code == 2
    assert "error: --backend: unknown backend 'nope'" in res.stderr
    assert (
        str(bundle) not in res.stderr
    )  # the option is at fault, not the bundle (it was "BUNDLE: unknown backend")
    for cmd in (["run", str(bundle), "q"], ["chat", str(bundle)]):
        res = runner.invoke(app, [*cmd, "--binding", "rules"])
        assert (
            res.exit_code == 2
            and "error: --binding must be auto, copy-head or none, got 'rules'" in res.stderr
        )
        assert str(bundle) not in res.stderr


def test_chat_repl_history_save_and_resume(bundle, tmp_path):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Hello!", "You said hi before.", "Still here."]))
    saved = tmp_path / "conv.json"
    res = runner.invoke(
        app,
        ["chat", str(bundle), "--model", str(script), "--save", str(saved)],
        input="hi\n\n/history\nremember?\n/exit\n",
    )
    assert res.exit_code == 0, res.output
    assert "agent> Hello!" in res.stdout
    assert "user> hi" in res.stdout and "assistant> Hello!" in res.stdout
    assert "agent> You said hi before." in res.stdout
    conv = Conversation.load(saved)
    assert [m["content"] for m in conv.messages] == ["hi", "Hello!", "remember?", "You said hi before."]
    script.write_text(json.dumps(["Still here."]))
    res = runner.invoke(
        app, ["chat", str(bundle), "--model", str(script), "--load", str(saved)], input="again\n"
    )
    assert res.exit_code == 0, res.output  # EOF ends the REPL
    assert "2 earlier turn(s)" in res.stdout
    assert "agent> Still here." in res.stdout


def test_chat_load_of_a_missing_file_names_the_conversation_file(bundle, tmp_path):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Hello!"]))
    missing = tmp_path / "nope.json"
    res = runner.invoke(app, ["chat", str(bundle), "--model", str(script), "--load", str(missing)], input="")
    assert res.exit_code == 2
    assert f"--load {missing}: cannot read the conversation file: No such file or directory" in res.stderr


def test_cli_rejects_empty_question_and_zero_budget_cleanly():
    """Bad CLI input gets a one-line error and exit code 2, never a traceback."""
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", str(root / "examples/code_search/bundle.yaml"), "  "],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "question is empty" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "agentkit", "generate", "hi", "--max-new-tokens", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "hi", "--seed", "99999999999999999999999"], "seed must fit in a signed 64-bit integer"),
        (["generate", "", "--raw"], "the prompt is empty"),
        (["generate", ""], "the prompt is empty"),
        (["generate", "  \n"], "the prompt is empty"),
        (["generate", "hi", "--threads", "-1"], "--threads"),
        (["eval", "bfcl", "--limit", "0"], "--limit"),
        (
            ["eval", "bfcl", "-c", "parallell", "--data", "q.json"],
            "unknown BFCL category 'parallell'; choose one",
        ),
    ],
)
def test_cli_bad_options_exit_2_without_traceback(args, message):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "agentkit", *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stdout + out.stderr and "Traceback" not in out.stderr


def _agentkit(*args: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_eval_empty_question_file_and_generate_answer_without_end_marker(tmp_path):
    import json

    empty = tmp_path / "empty.json"
    empty.write_text("")
    out = _agentkit("eval", "bfcl", "--data", str(empty))
    assert out.returncode == 2 and "no BFCL questions read" in out.stderr, out.stdout + out.stderr
    out = _agentkit("generate", "hi", "--json", "--threads", "1")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)["answer"]
    assert answer and not answer.endswith(("<turn|>", "<eos>", "<|tool_response>")), answer

    # --live with stdout piped: the last canvas frame and the stats line are separate lines
    out = _agentkit("generate", "hi", "--live", "--threads", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("canvases "), out.stdout
    assert len(lines) >= 2 and "canvases" not in lines[-2], out.stdout


def test_eval_names_a_bad_checkpoint_in_one_line_and_takes_model_like_run(tmp_path):
    import shutil

    from model.checkpoint.loading import DECODING_FILE, DEFAULT_CHECKPOINT

    ck = tmp_path / "ck"
    shutil.copytree(DEFAULT_CHECKPOINT, ck)
    (ck / DECODING_FILE).write_text('{"repeat_window": 0}')
    for cmd in (["eval", "heldout", "--limit", "1"], ["eval", "bfcl", "--limit", "1"]):
        for flag in ("--checkpoint", "--model"):
            out = runner.invoke(app, [*cmd, flag, str(ck)])
            assert out.exit_code == 2, out.output
            assert "repeat_window: input should be greater than or equal to 1, got 0" in out.output
            assert "Traceback" not in out.output


def test_the_command_list_shows_each_summary_as_one_paragraph():
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "300", "TERM": "dumb"}).output
    # the chat docstring breaks its first paragraph after "/save PATH,"; the list joins the lines again
    assert "/save PATH, /image PATH (attach an image to the next message)" in out
    assert "Train the embedded checkpoint" in out  # an explicit help= wins over the docstring


def test_the_quality_benchmarks_name_a_missing_checkpoint_in_one_line(tmp_path, capsys):
    import importlib

    for name in ("bot_questions", "checkpoint_quality"):
        mod = importlib.import_module(f"benchmarks.{name}")
        assert mod.main(["--checkpoint", str(tmp_path / "nowhere")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"{name}: ") and "checkpoint folder does not exist" in err, err


@pytest.mark.parametrize("where", ["dir", "missing_folder"])
def test_chat_refuses_a_save_path_that_cannot_be_a_file_before_loading_anything(bundle, tmp_path, where):
    target = tmp_path if where == "dir" else tmp_path / "no" / "conv.json"
    res = runner.invoke(app, ["chat", str(bundle), "--save", str(target)], input="hi\n")
    assert res.exit_code == 2
    expected = "is a directory" if where == "dir" else f"folder {tmp_path / 'no'} does not exist"
    assert f"--save {target}: {expected}" in res.stderr
    assert "you>" not in res.stdout


def test_chat_goes_on_when_saving_after_a_turn_fails(bundle, tmp_path, monkeypatch):
    # a save that fails mid-chat (disk full...) is one line; the chat, its history and /save PATH go on
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Hello!", "Again."]))
    real_save = Conversation.save

    def save(self, path):
        if pathlib.Path(path).name == "conv.json":
            raise OSError(28, "No space left on device")
        real_save(self, path)

    monkeypatch.setattr(Conversation, "save", save)
    other = tmp_path / "other.json"
    res = runner.invoke(
        app,
        ["chat", str(bundle), "--model", str(script), "--save", str(tmp_path / "conv.json")],
        input=f"hi\nmore\n/save {other}\n",
    )
    assert res.exit_code == 0, res.output
    assert "agent> Hello!" in res.stdout and "agent> Again." in res.stdout
    assert f"--save: cannot write {tmp_path / 'conv.json'}: No space left on device" in res.stderr
    assert [m["content"] for m in Conversation.load(other).messages] == ["hi", "Hello!", "more", "Again."]


def test_version_and_short_help_flags():
    from agentkit import __version__

    for flag in ("--version", "-V"):
        res = runner.invoke(app, [flag])
        assert res.exit_code == 0 and res.stdout.strip() == __version__
    for args in (["-h"], ["run", "-h"], ["eval", "heldout", "-h"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, (args, res.output)
        assert "Usage:" in res.stdout and "--help" in res.stdout


def test_chat_prints_an_answer_that_looks_like_markup_as_written(bundle, tmp_path):
    # rich markup in an answer was read as styles: "list[int]" printed as "list", "[/bold]" raised MarkupError
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Use list[int] and [red]dict[str, Any][/] here [/bold]"]))
    res = runner.invoke(app, ["chat", str(bundle), "--model", str(script)], input="types?\n")
    assert res.exit_code == 0, res.output
    assert "agent> Use list[int] and [red]dict[str, Any][/] here [/bold]" in res.stdout


def test_generate_names_a_checkpoint_path_with_brackets_as_written():
    out = _agentkit("generate", "hi", "--model", "/nonexistent/ck[/red]pt")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error: /nonexistent/ck[/red]pt: checkpoint folder does not exist" in out.stdout + out.stderr


def test_terminal_control_characters_of_tools_and_answers_are_printed_escaped(tmp_path, tools_module):
    # a tool response or an answer could recolour, retitle or overwrite the terminal (ESC, OSC, CR)
    from agentkit.render import terminal_safe

    assert terminal_safe("a\x1b[31mb\rc\x07d\te\nf\x9bg é") == "a\\x1b[31mb\\x0dc\\x07d\te\nf\\x9bg é"
    mod = tools_module(
        "escape_tools",
        '''
        def shout(q: str) -> str:
            """Shout."""
            return "\\x1b]0;pwned\\x07\\x1b[2Jloud\\rquiet"
        ''',
    )
    (tmp_path / "s.json").write_text(
        json.dumps([{"tool_calls": [{"name": "shout", "arguments": {"q": "\x1b[31m"}}]}, "done \x1b[5m!"])
    )
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: b\nmodel: {backend: scripted, name: s.json}\n"
        f"tools:\n  - {{name: shout, python: '{mod}:shout'}}\n"
    )
    res = runner.invoke(app, ["run", str(p), "hi"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.stdout and "\r" not in res.stdout and "\x07" not in res.stdout
    assert 'shout(q="\\u001b[31m")' in res.stdout  # arguments are JSON, escaped as such
    assert "\\x1b]0;pwned\\x07\\x1b[2Jloud\\x0dquiet" in res.stdout and "done \\x1b[5m!" in res.stdout
    (tmp_path / "s.json").write_text(json.dumps(["done \x1b[5m!"]))
    res = runner.invoke(app, ["chat", str(p)], input="hi\n/history\n")
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.stdout and "agent> done \\x1b[5m!" in res.stdout


def test_eval_bfcl_names_a_data_file_it_cannot_read_in_one_line(tmp_path):
    for bad in (tmp_path, tmp_path / "missing.json"):  # a directory was an IsADirectoryError traceback
        res = runner.invoke(app, ["eval", "bfcl", "--data", str(bad), "--limit", "1"])
        assert res.exit_code == 2, res.output
        why = "Is a directory" if bad == tmp_path else "No such file or directory"
        assert f"error: {bad}: cannot read the BFCL file: {why}" in res.stderr


def test_run_json_keeps_stdout_to_the_json_when_tools_print(tmp_path, tools_module):
    # a bundle module or a tool that prints (at import, in a call) made `run --json` stdout invalid JSON
    mod = tools_module(
        "noisy_tools",
        '''
        print("noisy: imported")

        def add(a: int, b: int) -> int:
            """Add."""
            print(f"noisy: adding {a} and {b}")
            return a + b
        ''',
    )
    (tmp_path / "s.json").write_text(
        json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, "3"])
    )
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: b\nmodel: {backend: scripted, name: s.json}\n"
        f"tools:\n  - {{name: add, python: '{mod}:add'}}\n"
    )
    res = runner.invoke(app, ["run", str(p), "hi", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["answer"] == "3"
    assert "noisy: imported" in res.stderr and "noisy: adding 1 and 2" in res.stderr


def test_chat_save_and_image_read_a_tilde_as_the_home_folder(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Hello!"]))
    res = runner.invoke(
        app, ["chat", str(bundle), "--model", str(script)], input="hi\n/save ~/conv.json\n/image ~/nope.png\n"
    )
    assert res.exit_code == 0, res.output
    assert f"saved 1 turn(s) to {tmp_path / 'conv.json'}" in res.stdout
    assert Conversation.load(tmp_path / "conv.json").turns == 1
    assert f"/image: {tmp_path / 'nope.png'}: no such image file" in res.stderr


def test_check_validates_a_bundle_without_running_it(bundle, tmp_path):
    res = runner.invoke(app, ["check", str(bundle)])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [
        f"{bundle}: ok: bundle 'calc' for the scripted backend, 2 tool(s)",
        "  add",
        "  fail",
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("agentkit_bundle: 1\nname: bad\nagent: {max_steps: six}\ntools: []\n")
    res = runner.invoke(app, ["check", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:3:20: agent.max_steps: 'six' is not of type 'integer'" in res.stderr
    res = runner.invoke(app, ["check", str(bad), "--json"])
    assert res.exit_code == 2
    assert json.loads(res.stdout) == {
        "ok": False,
        "issues": [
            {
                "file": str(bad),
                "line": 3,
                "column": 20,
                "field": "agent.max_steps",
                "message": "'six' is not of type 'integer'",
            }
        ],
    }
    # every independent error of a tool at once, each at its own line and field
    bad.write_text(
        "agentkit_bundle: 1\nname: bad\ntools:\n  - name: s\n    sandbox: {code: x}\n    grounded: [n, nope]\n"
        "    parameters: {type: object, properties: {n: {type: integer}, q: {type: strin}}, required: q}\n"
    )
    res = runner.invoke(app, ["check", str(bad)])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[1:] == [
        f"  {bad}:7:75: tools[0].parameters.properties.q.type: not a valid JSON Schema: 'strin' is not valid "
        "under any of the given schemas",
        f"  {bad}:7:94: tools[0].parameters.required: not a valid JSON Schema: 'q' is not of type 'array'",
    ]
    bad.write_text(bad.read_text().replace("strin}}, required: q", "string}}"))
    res = runner.invoke(app, ["check", str(bad)])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[1:] == [
        f"  {bad}:6:16: tools[0].grounded[0]: tool 's': grounded parameter 'n' must be a string (a span of the "
        "conversation)",
        f"  {bad}:6:19: tools[0].grounded[1]: tool 's': grounded parameter 'nope' is not one of its parameters "
        "(['n', 'q'])",
    ]
    res = runner.invoke(app, ["check", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2 and "missing.yaml: cannot read bundle: No such file or directory" in res.stderr
    # with --json an unreadable file is an issue on stdout too (it was the plain line on stderr, stdout empty)
    for path, why in ((tmp_path / "missing.yaml", "No such file or directory"), (tmp_path, "Is a directory")):
        res = runner.invoke(app, ["check", str(path), "--json"])
        assert res.exit_code == 2
        assert json.loads(res.stdout) == {
            "ok": False,
            "issues": [
                {
                    "file": str(path),
                    "line": None,
                    "column": None,
                    "field": "",
                    "message": f"cannot read bundle: {why}",
                }
            ],
        }


def test_run_and_chat_seed_help_is_plain_and_its_range_is_checked(bundle):
    for cmd in ("run", "chat"):
        res = runner.invoke(app, [cmd, "--help"])
        assert (
            res.exit_code == 0 and "9223372036854775807" not in res.stdout
        )  # was a 19-digit range in --help
    res = runner.invoke(app, ["run", str(bundle), "hi", "--seed", str(2**63)])
    assert res.exit_code == 2 and "must fit in a signed 64-bit integer" in res.output


def test_chat_warns_when_every_tool_call_of_a_turn_failed(bundle, tmp_path):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "fail", "arguments": {"x": 1}}]}, "It is 7."]))
    res = runner.invoke(app, ["chat", str(bundle), "--model", str(script)], input="what?\n")
    assert res.exit_code == 0, res.output
    assert "agent> It is 7." in res.stdout
    assert "warning: every tool call failed (1): the answer rests on no tool response" in res.stderr


def test_the_renderer_cuts_long_arguments_as_it_cuts_responses():
    out = io.StringIO()
    renderer = RichRenderer(Console(file=out, width=100), max_chars=60)
    renderer(ToolCallStarted(0, "call_0", "run_python", {"code": "print(1)\n" * 1000, "timeout": 5}))
    text = out.getvalue()
    assert text == "  → run_python(" + ('code="' + "print(1)\\n" * 6)[:59] + "…)\n"  # 60 characters
    short = io.StringIO()
    RichRenderer(Console(file=short, width=100))(ToolCallStarted(0, "c", "add", {"a": 2, "b": 40}))
    assert short.getvalue() == "  → add(a=2, b=40)\n"


def test_run_says_how_to_pass_a_question_that_starts_with_a_dash(bundle, tmp_path):
    res = runner.invoke(app, ["run", str(bundle), "-5 degrees in Oslo?"])
    assert res.exit_code == 2
    err = " ".join(res.stderr.replace("│", " ").split())  # rich boxes and wraps the error
    assert (
        "No such option: -5; a question that starts with '-' goes after --: agentkit run BUNDLE -- \"-5 degrees in Oslo?\""
        in err
    )
    res = runner.invoke(
        app, ["run", str(bundle), "-what", "is", "this", "--json"]
    )  # unquoted: the words joined
    err = " ".join(res.stderr.replace("│", " ").split())
    assert res.exit_code == 2 and "No such option: -w;" in err
    assert 'goes after --: agentkit run BUNDLE -- "-what is this"' in err and '-w..."' not in err
    res = runner.invoke(app, ["generate", "-what's $HOME"])  # the same hint, shell-quoted
    err = " ".join(res.stderr.replace("│", " ").split())
    assert "a prompt that starts with '-' goes after --: agentkit generate -- '-what'\"'\"'s $HOME'" in err
    res = runner.invoke(app, ["run", str(bundle), "--jsn", "q"])  # a mistyped long option: no such hint
    assert res.exit_code == 2 and "goes after --" not in res.stderr
    script = tmp_path / "plain.json"
    script.write_text(json.dumps(["Cold."]))
    res = runner.invoke(app, ["run", str(bundle), "--model", str(script), "--", "-5 degrees in Oslo?"])
    assert res.exit_code == 0, res.output
    assert "Cold." in res.stdout


def test_run_exits_1_and_says_so_when_the_final_answer_is_empty(bundle, tmp_path):
    script = tmp_path / "empty.json"
    script.write_text(json.dumps([" \n"]))
    res = runner.invoke(app, ["run", str(bundle), "Hi", "--model", str(script)])
    assert res.exit_code == 1, res.output  # as a run with no answer
    assert "(empty)" in res.stdout
    assert "error: the final answer is empty: the model answered with no text" in res.stderr
    res = runner.invoke(app, ["run", str(bundle), "Hi", "--model", str(script), "--json"])
    assert res.exit_code == 1
    assert json.loads(res.stdout)["answer"].strip() == ""
    assert "error: the final answer is empty" in res.stderr
    res = runner.invoke(app, ["chat", str(bundle), "--model", str(script)], input="Hi\n/exit\n")
    assert res.exit_code == 0, res.output  # the chat goes on
    assert "warning: the final answer is empty" in res.stderr


def test_chat_load_takes_a_bare_list_of_messages(bundle, tmp_path):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Still here."]))
    saved = tmp_path / "list.json"
    saved.write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}])
    )
    res = runner.invoke(
        app, ["chat", str(bundle), "--model", str(script), "--load", str(saved)], input="again\n"
    )
    assert res.exit_code == 0, res.output
    assert "1 earlier turn(s)" in res.stdout and "agent> Still here." in res.stdout


def test_chat_history_says_when_it_is_empty(bundle, tmp_path):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Hello!"]))
    res = runner.invoke(
        app, ["chat", str(bundle), "--model", str(script)], input="/history\nhi\n/reset\n/history\n"
    )
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.count("the history is empty") == 2  # at the start, and after /reset
    assert out.index("agent> Hello!") < out.index("history cleared") < out.rindex("the history is empty")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--max-body-mb", "nan"], "'--max-body-mb': must be a finite number, got nan"),
        (["serve", "--max-body-mb", "0"], "'--max-body-mb': must be at least 0.001, got 0.0"),
        (["serve", "--drain-timeout", "1e400"], "'--drain-timeout': must be a finite number, got inf"),
        (["specialize", "b.yaml", "--out", "o", "--lr", "nan"], "'--lr': must be a finite number, got nan"),
        (["specialize", "b.yaml", "--out", "o", "--lr", "0"], "'--lr': must be greater than 0.0, got 0.0"),
        (["specialize", "b.yaml", "--out", "o", "--minutes", "inf"], "'--minutes': must be a finite number"),
    ],
)
def test_float_options_refuse_nan_and_infinity_as_such(args, message):
    # NaN said "should be greater than or equal to 0.001"; --lr nan and --drain-timeout inf were taken
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.stderr.replace("│", " ").split())
