"""FSDP2 through ModelParallelStrategy on CPU/gloo: two ranks train exactly like one process.

Rank r trains on recorded batch r (different tasks, different row counts, so the rank with fewer
rows has to run idle passes to keep FSDP's collectives paired); one process trains on both
batches merged. The update must be the same: loss, gradient norm, parameters; and the two
ranks' parameters must be identical afterwards. A second test runs the real CLI on two ranks.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from envs.registry import SequentialPool, make_env_factory
from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.policy import load_policy
from scpo_lightning.rollout import RolloutConfig, collect
from scpo_lightning.testing import build_tiny_llama
from tests.fsdp2_worker import train
from tests.test_cli import quickstart_on_corridor

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
#: torchrun starts both ranks at once (Lightning itself would start rank 1 only once rank 0 is up).
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def run_ranks(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a multi-process command; a hung rank fails the test and leaves no process behind
    (torchrun stops its ranks on SIGTERM; they run in sessions of their own)."""
    proc = subprocess.Popen(command, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"{' '.join(command)[-160:]} hung for {timeout}s (a collective without partner?):\n{err[-3000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def record_batches(model_dir: Path, path: Path) -> list[int]:
    """Two rollout batches of the corridor world (2 groups x 4 each), pickled to ``path``."""
    policy, tokenizer = load_policy(str(model_dir))
    engine = HFEngine(policy, tokenizer, generation_batch_size=16)
    pool = SequentialPool(make_env_factory("corridor", {"rooms": 3, "max_steps": 4}), 8)
    cfg = RolloutConfig(env="alfworld", max_steps=4, action_mode="constrained", max_prompt_tokens=4096)
    batches = [collect(pool, engine, tokenizer, [("train", 2 * r), ("train", 2 * r + 1)], 4,
                       SamplingParams(1.0, 1.0, 12, seed=r), cfg, progress=False) for r in range(2)]
    path.write_bytes(pickle.dumps(batches))
    return [len(b) for b in batches]


@pytest.mark.slow
def test_two_fsdp2_ranks_update_like_one_process(tmp_path):
    model = build_tiny_llama(tmp_path / "tiny")
    rows = record_batches(model, tmp_path / "batches.pkl")
    assert rows[0] != rows[1], "the ranks must hold different row counts to exercise the idle passes"
    out = tmp_path / "out"
    out.mkdir()
    proc = run_ranks([*TORCHRUN, str(ROOT / "tests" / "fsdp2_worker.py"), str(model), str(tmp_path / "batches.pkl"),
                      str(out), "dp"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    single_dir = tmp_path / "single"
    single_dir.mkdir()
    train(str(model), str(tmp_path / "batches.pkl"), str(single_dir), "single")
    single = torch.load(single_dir / "rank0.pt", weights_only=False)

    assert [r["rows"] for r in ranks] == rows and single["rows"] == sum(rows)
    # SCPO shaped each rank's groups alone, exactly as in the merged batch.
    torch.testing.assert_close(torch.as_tensor(ranks[0]["shaped"].tolist() + ranks[1]["shaped"].tolist()),
                               torch.as_tensor(single["shaped"].tolist()))
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/grad_norm",
                "train/advantage_mean", "train/advantage_std", "train/rows", "train/optimizer_steps"):
        for r in ranks:  # every rank logs the global value
            assert r["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-4, abs=1e-6), key
    for name, value in ranks[0]["params"].items():
        assert torch.equal(value, ranks[1]["params"][name]), f"ranks differ in {name}"
        torch.testing.assert_close(value, single["params"][name], rtol=0, atol=1e-4, msg=name)  # Adam: ~lr·sign(g), tiny |g| jitter


@pytest.mark.slow
def test_cli_trains_validates_resumes_and_exports_on_two_ranks(tmp_path):
    config = quickstart_on_corridor(tmp_path, groups_per_batch=2, group_size=2)
    data = yaml.safe_load(config.read_text())
    # 3 validation episodes on 2 ranks: blocks of 2 and 1, batches of one episode each.
    data["data"].update(val_episodes=3, val_batch_episodes=1, workers=0)
    data["trainer"].update(devices=2, precision="32-true", strategy={
        "class_path": "lightning.pytorch.strategies.ModelParallelStrategy",
        "init_args": {"data_parallel_size": 2, "tensor_parallel_size": 1}})
    # LoRA is refused under ModelParallelStrategy (model_setup.check_strategy): full fine-tuning here.
    data["model"].update(micro_batch_rows=4, generation_batch_size=8, reference_offload=True, lora_rank=0)
    for callback in data["trainer"]["callbacks"]:
        if callback["class_path"].endswith("HFExport"):
            callback["init_args"] = {}  # the default folder: under the logger's, which all ranks must ask for
    config.write_text(yaml.safe_dump(data))

    def fit(*extra: str) -> subprocess.CompletedProcess:
        return run_ranks([*TORCHRUN, str(ROOT / "train.py"), "fit", "--config", str(config), *extra], tmp_path)

    first = fit()
    assert first.returncode == 0, first.stderr[-4000:]
    assert "[val @ it 0]" in first.stdout and "[it 1]" in first.stdout
    last = tmp_path / "ckpt" / "last.ckpt"
    assert last.is_dir(), "a sharded (distributed) checkpoint is a folder"
    hf = tmp_path / "runs" / "quickstart" / "hf_policy"
    assert (hf / "config.json").exists()
    exported = load_policy(str(hf))[0]
    assert sum(p.numel() for p in exported.parameters()) == sum(
        p.numel() for p in load_policy(str(tmp_path / "tiny"))[0].parameters())

    # The reference is in no checkpoint; the sharded policy and optimizer load back on both ranks.
    second = fit("--trainer.max_epochs", "2", "--ckpt_path", "last")  # found by ModelCheckpoint, a folder
    assert second.returncode == 0, second.stderr[-4000:]
    assert "[it 2]" in second.stdout and "[it 1]" not in second.stdout
