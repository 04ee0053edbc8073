"""Staged training: a retrain cut into stages of a fixed step count, each one a checkpoint folder to commit.

``python -m model.training --stages-dir DIR --stage 0 ...`` trains a fresh tokenizer and model into
``DIR/stage-0``; ``--stage N`` starts from ``DIR/stage-{N-1}`` (or ``--from-stage K``): its weights, tokenizer and
AdamW moments, with a fresh warm-up + cosine schedule of ``--steps`` steps and data drawn with seed ``SEED + N``.
A stage folder, written once at the stage's end, is an offline-loadable checkpoint plus ``optimizer.pt`` (the
moments in bfloat16), ``stage.json`` (steps, minutes, loss, held-out figures), ``train_config.json`` and
``log.jsonl``; the run's working files (resumable trainer state) live in ``OUT_DIR``, by default
``runs/stages/<DIR name>/stage-N``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from model.training.settings import MODEL_OPTIONS, TrainConfig
from model.training.train import train

#: Files of a stage folder besides the checkpoint's own.
OPTIMIZER_FILE = "optimizer.pt"
STAGE_FILE = "stage.json"

#: Decoding settings a stage folder takes from the shipped checkpoint (not tuned for the stage).
DECODING_FILES = ("generation_config.json", "agentkit_decoding.json")


def stage_dir(stages_dir: str | Path, n: int) -> Path:
    """The folder of stage ``n`` (``>= 0``) of a staged retrain: ``stages_dir/stage-n``."""
    return Path(stages_dir) / f"stage-{n}"


def compact_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """A new optimizer ``state_dict`` with every floating state tensor but the ``step`` counters in bfloat16
    (the second moment's tiny values keep their range, with about 3 significant digits)."""
    return _cast_state(state, torch.bfloat16)


def expand_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`compact_optimizer_state`: the same tensors back in float32 (values as stored)."""
    return _cast_state(state, torch.float32)


def _cast_state(state: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """A copy of optimizer ``state`` with its floating tensors but the ``step`` counters cast to ``dtype``."""

    def cast(k: str, v: Any) -> Any:
        return v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() and k != "step" else v

    return {
        "state": {i: {k: cast(k, v) for k, v in s.items()} for i, s in state["state"].items()},
        "param_groups": state["param_groups"],
    }


def _previous_stage(cfg: TrainConfig, n: int) -> Path:
    """The folder of the stage stage ``n`` starts from, checked against ``cfg`` (``ValueError``: ``from_stage``
    not in ``[0, n)``, a missing file, or another model option)."""
    k = n - 1 if cfg.from_stage is None else cfg.from_stage
    if not 0 <= k < n:
        raise ValueError(f"--from-stage must be an earlier stage (0 to {n - 1}), got {k}")
    prev = stage_dir(cfg.stages_dir, k)
    for name in ("model.safetensors", OPTIMIZER_FILE, "train_config.json"):
        if not (prev / name).is_file():
            raise ValueError(f"--stage {n} starts from {prev}, which has no {name}: train stage {k} first")
    saved = json.loads((prev / "train_config.json").read_text())
    diff = [o for o in MODEL_OPTIONS if o in saved and saved[o] != getattr(cfg, o)]
    if diff:
        said = ", ".join(f"--{o.replace('_', '-')} {saved[o]} (asked {getattr(cfg, o)})" for o in diff)
        raise ValueError(f"stage {k} ({prev}) was trained with {said}: give the same model options")
    return prev


def stage_config(cfg: TrainConfig) -> tuple[TrainConfig, Path | None]:
    """The run configuration of stage ``cfg.stage`` (``out_dir`` ``runs/stages/<stages_dir name>/stage-N`` unless
    given, ``seed + N``, ``init_from`` the previous stage) and the folder it starts from (``None`` for stage 0).

    Raises:
        ValueError: no stage, ``init_from`` given, the stage already written, or a problem with the previous stage
            (:func:`_previous_stage`); :class:`TrainConfig` refuses the other bad combinations.
    """
    n = cfg.stage
    if n is None:
        raise ValueError("stage_config needs --stage N")
    if cfg.init_from:
        raise ValueError("a stage starts from the previous stage: leave out --init-from")
    dest = stage_dir(cfg.stages_dir, n)
    if (dest / STAGE_FILE).exists():
        raise ValueError(f"stage {n} is already trained ({dest}): give --stage {n + 1}")
    prev = _previous_stage(cfg, n) if n > 0 else None
    out_dir = cfg.out_dir
    if out_dir == TrainConfig.out_dir:
        out_dir = str(Path("runs") / "stages" / Path(cfg.stages_dir).name / f"stage-{n}")
    run = dataclasses.replace(
        cfg, out_dir=out_dir, seed=cfg.seed + n, init_from=str(prev) if prev else "", final_dir=None
    )
    return run, prev


def load_stage_optimizer(prev: Path) -> dict[str, Any]:
    """The AdamW ``state_dict`` saved with stage folder ``prev``, in float32."""
    saved = torch.load(prev / OPTIMIZER_FILE, weights_only=False)
    return expand_optimizer_state(saved["optimizer"])


def write_stage(
    run: TrainConfig, final: Path, dest: Path, minutes: float, decoding_from: Path | None
) -> None:
    """Write the stage folder ``dest`` from a finished run: its final checkpoint, ``optimizer.pt``,
    ``stage.json``, ``train_config.json``, ``log.jsonl`` and the decoding files of ``decoding_from``."""
    out = Path(run.out_dir)
    state = torch.load(out / "checkpoint" / "trainer_state.pt", weights_only=False)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(final, tmp)
    if decoding_from is not None:
        for name in DECODING_FILES:
            if (decoding_from / name).is_file():
                shutil.copy2(decoding_from / name, tmp / name)
    torch.save({"optimizer": compact_optimizer_state(state["optimizer"])}, tmp / OPTIMIZER_FILE)
    for name in ("train_config.json", "log.jsonl"):
        shutil.copy2(out / name, tmp / name)
    prev_total = 0
    if run.init_from and (Path(run.init_from) / STAGE_FILE).is_file():
        prev_total = int(json.loads((Path(run.init_from) / STAGE_FILE).read_text())["total_steps"])
    log = out / "log.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    last = {  # the last logged held-out figures
        k: next((r[k] for r in reversed(records) if k in r), None)
        for k in ("heldout_loss", "heldout_acc_t1", "heldout_copy_t025")
    }
    info = {
        "stage": run.stage,
        "steps": int(state["step"]),
        "total_steps": prev_total + int(state["step"]),
        "minutes": round(minutes, 1),
        "seed": run.seed,
        "from": run.init_from or None,
        "loss_ema": state["extra"].get("loss_ema"),
        **last,
    }
    (tmp / STAGE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def run_stage(cfg: TrainConfig, decoding_from: Path | None = None) -> Path:
    """Train stage ``cfg.stage`` (see :func:`stage_config`) and return its folder, which takes the decoding
    files of ``decoding_from`` (``None``: the training defaults). ``ValueError``: see :func:`stage_config`."""
    run, prev = stage_config(cfg)
    t0 = time.time()
    final = train(run, optimizer_state=load_stage_optimizer(prev) if prev is not None else None)
    dest = stage_dir(cfg.stages_dir, int(run.stage or 0))
    write_stage(run, final, dest, (time.time() - t0) / 60, decoding_from)
    print(f"stage {run.stage}: {dest}")
    return dest
