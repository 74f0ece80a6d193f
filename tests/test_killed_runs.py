"""SIGKILL during rollout, update and checkpoint writing; ``--ckpt_path last`` resumes exactly.

Checkpoints are written by ``AtomicCheckpointIO`` (write-then-rename). One CLI run is killed in each phase, each at a later iteration, each resuming the one before it.
The last resume must end in the state of an uninterrupted run, bit for bit: weights, AdamW
moments and step counts, iteration counter; and validation keeps its schedule (no sanity pass
at resume, no iteration validated twice except the one whose checkpoint was lost).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from scpo_lightning.checkpoint_io import AtomicCheckpointIO
from tests.test_cli import quickstart_on_corridor

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS, VAL_EVERY = 4, 2
#: (phase, iteration it dies in). Each run resumes the previous one; the last one finishes.
KILLS = [("rollout", 2), ("update", 3), ("checkpoint", 4)]



def write_config(base: dict, run_dir: Path, name: str, kill: tuple[str, int] | None) -> Path:
    config = copy.deepcopy(base)
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(run_dir / "runs")
    for cb in config["trainer"]["callbacks"]:
        if cb["class_path"].endswith("ModelCheckpoint"):
            cb["init_args"]["dirpath"] = str(run_dir / "ckpt")
        if cb["class_path"].endswith("HFExport"):
            cb["init_args"]["dirpath"] = str(run_dir / "hf")
    if kill and kill[0] == "rollout":  # envs in a worker process, to see it outlive nothing
        config["data"]["workers"] = 1
    if kill:
        config["trainer"]["callbacks"].append({"class_path": "tests.kill_hook.KillAt", "init_args": {
            "phase": kill[0], "iteration": kill[1], "record": str(run_dir / f"{name}.killed.json")}})
    path = run_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def fit(config: Path, resume: bool) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), "fit", "--config", str(config)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd + (["--ckpt_path", "last"] if resume else []), cwd=config.parent,
                          capture_output=True, text=True, timeout=600, env=env)


def printed(proc: subprocess.CompletedProcess, pattern: str) -> list[int]:
    return [int(m) for m in re.findall(pattern, proc.stdout)]


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # dead, not reaped yet
    except FileNotFoundError:
        return True


def assert_same_state(got: dict, want: dict) -> None:
    assert got["epoch"] == want["epoch"] and got["global_step"] == want["global_step"]
    assert got["RolloutDataModule"] == want["RolloutDataModule"]
    assert got["state_dict"].keys() == want["state_dict"].keys()
    for key, value in want["state_dict"].items():
        assert torch.equal(got["state_dict"][key], value), key
    (opt_got,), (opt_want,) = got["optimizer_states"], want["optimizer_states"]
    assert opt_got["state"].keys() == opt_want["state"].keys() and opt_want["state"]
    for index, state in opt_want["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(opt_got["state"][index][name]), torch.as_tensor(value)), (index, name)


def test_a_failed_write_keeps_the_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"iteration": 1}, path)

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        io.save_checkpoint({"iteration": 2}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path) == {"iteration": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_symlinked_checkpoint_is_replaced_not_written_through(tmp_path):
    # last.ckpt left as a link by a save_last="link" run: the new file replaces the link itself.
    target = tmp_path / "epoch=0-step=1.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"iteration": 1}, target)
    (tmp_path / "last.ckpt").symlink_to(target.name)
    io.save_checkpoint({"iteration": 2}, tmp_path / "last.ckpt")
    assert not (tmp_path / "last.ckpt").is_symlink()
    assert io.load_checkpoint(tmp_path / "last.ckpt") == {"iteration": 2}
    assert io.load_checkpoint(target) == {"iteration": 1}


@pytest.mark.slow
def test_runs_killed_in_each_phase_resume_to_the_uninterrupted_result(tmp_path):
    base = yaml.safe_load(quickstart_on_corridor(tmp_path).read_text())
    base["trainer"].update(max_epochs=ITERATIONS, check_val_every_n_epoch=VAL_EVERY)
    base["model"].update(mini_batch_rows=4, micro_batch_rows=4)  # >= 2 optimizer steps per iteration
    base["data"]["workers"] = 0  # in-process envs (a spawned worker re-imports train.py: seconds per run)

    ref_dir, run_dir = tmp_path / "reference", tmp_path / "killed"
    ref_dir.mkdir(), run_dir.mkdir()
    ref = fit(write_config(base, ref_dir, "ref", None), resume=False)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert printed(ref, r"\[it (\d+)\]") == [1, 2, 3, 4]
    assert printed(ref, r"\[val @ it (\d+)\]") == [0, 2, 4]

    ckpt = run_dir / "ckpt" / "last.ckpt"
    complete = 0  # iterations in the newest complete checkpoint
    for n, (phase, iteration) in enumerate(KILLS):
        began = time.monotonic()
        proc = fit(write_config(base, run_dir, f"run{n}", (phase, iteration)), resume=n > 0)
        assert proc.returncode == -9, f"{phase}: {proc.returncode}\n{proc.stderr[-3000:]}"
        record = json.loads((run_dir / f"run{n}.killed.json").read_text())
        assert record["phase"] == phase
        # the run trained from the iteration after the checkpoint up to the one it died in (whose
        # update finished, and was logged, when it died writing the checkpoint)
        trained = list(range(complete + 1, iteration + (phase == "checkpoint")))
        assert printed(proc, r"\[it (\d+)\]") == trained
        vals = printed(proc, r"\[val @ it (\d+)\]")
        assert vals == [k for k in ([0] if n == 0 else []) + list(range(complete + 1, iteration + 1))
                        if k % VAL_EVERY == 0 and (k < iteration or phase == "checkpoint")], proc.stdout
        if phase == "rollout":  # orphaned env workers see their pipe close and exit
            deadline = time.monotonic() + 20
            while not all(gone(p) for p in record["workers"]) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert all(gone(p) for p in record["workers"]), record
        complete = iteration - 1
        state = load(ckpt)  # loads: not torn
        assert state["epoch"] == complete - 1 and state["RolloutDataModule"]["iteration"] == complete
        if phase == "checkpoint":  # the half-written bytes went to the temp file, never to last.ckpt
            assert record["file"] == f"{ckpt}.tmp"
            assert Path(record["file"]).stat().st_size == record["size"] // 2
        print(f"run killed in {phase}: {time.monotonic() - began:.1f}s")

    final = fit(write_config(base, run_dir, "final", None), resume=True)
    assert final.returncode == 0, final.stderr[-3000:]
    assert printed(final, r"\[it (\d+)\]") == [ITERATIONS]
    assert printed(final, r"\[val @ it (\d+)\]") == [ITERATIONS]
    assert_same_state(load(ckpt), load(ref_dir / "ckpt" / "last.ckpt"))
