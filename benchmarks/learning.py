"""Does SCPO's step credit beat GiGPO? GRPO, GiGPO, SCPO and variants trained seed by seed on CPU.

Every run starts from the same policy (``configs/learning.yaml``: SmolLM2-135M with LoRA, fp32)
and differs from the others of its seed only in the method (``benchmarks/learning_run.py``,
``METHODS``); its seed sets the LoRA initialisation, the training task stream and every rollout's
sampling seed. Validation: iteration 0 and the final iteration on the frozen test panel, the
ones between on the dev panel (``--dev``: all on the dev panel, for choosing the recipe).

    python -m benchmarks.learning --methods gigpo scpo --seeds 0 1   # each run file: its wall time in `timing`
    python -m benchmarks.learning --grid      # every (method, seed) of GRID not yet done
    python -m benchmarks.learning --report    # learning.json, learning.png and the tables
    python -m benchmarks.learning --smoke     # a tiny random model on the corridor world: seconds

Each run writes ``<runs-dir>/<method>_seed<k>.json`` when it finishes, with a config hash over
everything that changes its arithmetic (the run's whole config, iterations, validation
schedule, panels, CLI overrides, library versions); a run whose file has the same hash is
skipped, so the grid accumulates over sittings and an interrupted one resumes. Iteration 0 is
the same for every method of a seed (same weights, games and sampling seed): the first run of
a seed measures it into ``iteration0_seed<k>.json`` and the others reuse it
(``--no-shared-zero`` measures it in every run and fails if it differs).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, load_average, machine, read_yaml
from benchmarks.learning_ranking import ranking
from benchmarks.learning_report import aggregate, plot, print_tables
from benchmarks.learning_run import GRID, METHODS, Recorder, panels, run_config, sha256, train_one

CONFIG = Path("configs/learning.yaml")
RUNS = RESULTS / "learning_runs"
DEV_RUNS = RESULTS / "learning_dev_runs"


def versions() -> dict[str, str]:
    import importlib.metadata as md

    return {name: md.version(name) for name in ("torch", "transformers", "peft", "lightning", "numpy")}


def commit() -> str | None:
    import subprocess

    out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None


def smoke_config(folder: Path, config: Path = CONFIG) -> dict[str, Any]:
    """``config`` on the tiny random model, the corridor world and the lexical scorer (seconds a run)."""
    from scpo_lightning.testing import build_tiny_llama

    cfg = read_yaml(config)
    for cb in cfg["trainer"]["callbacks"]:
        if cb["class_path"].endswith("SCPOCallback"):
            cb["init_args"]["scorer"] = "lexical"
    cfg["model"].update(policy=str(build_tiny_llama(folder / "tiny")), lora_rank=4)
    cfg["data"].update(env="corridor", env_options={"rooms": 3, "max_steps": 4}, workers=1, val_split="valid",
                       val_episodes=4, val_batch_episodes=4, progress=False)
    cfg["data"]["rollout"].update(max_steps=4)
    return cfg


def run_one(method: str, seed: int, base: dict[str, Any], pan: dict[str, Any], args: argparse.Namespace,
            extra: list[str]) -> dict[str, Any] | None:
    """Train (method, seed) unless its result file has the same config hash; returns the result written."""
    recipe = {"config": base, "iterations": args.iterations, "val_every": args.val_every, "extra": extra,
              "panels": pan["ids"], "dev_only": args.dev, "versions": versions()}
    zero_hash = sha256({**recipe, "seed": seed})  # what iteration 0 depends on: not the method
    cfg = run_config(method, seed, base)
    config_hash = sha256({**recipe, "run_config": cfg})
    path = args.runs_dir / f"{method}_seed{seed}.json"
    if path.exists() and json.loads(path.read_text()).get("config_sha256") == config_hash and not args.force:
        print(f"[learning] {path} is done with this config hash: skipped", flush=True)
        return None
    zero_path = args.runs_dir / f"iteration0_seed{seed}.json"
    zero = json.loads(zero_path.read_text()) if zero_path.exists() else None
    zero = zero if zero is not None and zero["sha256"] == zero_hash else None
    measure = zero is None or args.no_shared_zero
    log = args.log_dir
    cli = [f"--trainer.max_epochs={args.iterations}", f"--trainer.check_val_every_n_epoch={args.val_every}",
           f"--trainer.num_sanity_val_steps={-1 if measure else 0}", f"--trainer.logger.init_args.save_dir={log.parent}",
           f"--trainer.logger.init_args.name={log.name}", f"--trainer.logger.init_args.version={method}_seed{seed}",
           *extra]
    recorder = Recorder(pan["specs"], args.dev)
    started = machine()
    with tempfile.TemporaryDirectory(prefix="learning_run_") as folder:
        config = Path(folder) / f"{method}_seed{seed}.yaml"
        config.write_text(json.dumps(cfg))  # JSON is YAML; the result file holds it too (`config`)
        wall = train_one(config, cli, recorder)
    validations = recorder.validations
    if measure:
        if zero is not None and zero["validation"] != validations[0]:
            raise RuntimeError(f"iteration 0 of {method} seed {seed} differs from {zero_path}: sharing it is unsound")
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        zero_path.write_text(json.dumps({"sha256": zero_hash, "seed": seed, "validation": validations[0]}, indent=1))
    else:
        validations = [zero["validation"], *validations]
    check_panels(validations, recorder.iterations, pan)
    result = {"what": "one (method, seed) run of the learning benchmark (benchmarks/learning.py)",
              "method": method, "seed": seed, "config_sha256": config_hash, "recipe_sha256": sha256(recipe),
              "settings": dict(zip(("estimator", "scpo", "data"), METHODS[method])), "config": cfg,
              "iterations_planned": args.iterations, "val_every": args.val_every, "cli_overrides": extra,
              "dev_only": args.dev, "versions": recipe["versions"],
              "panels": {**{k: pan["ids"][k] for k in ("train", "dev", "test")}, "test_sha256": pan["test_sha256"]},
              "iteration_0_from": zero_path.name, "validations": validations, "iterations": recorder.iterations,
              "timing": {"fit_s": round(wall, 1), "iteration_0_measured_here": measure, **recorder.wall},
              "provenance": {"commit": commit(), "machine": started, "load_average_at_end": load_average(),
                             "shared_machine": True}}
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"[learning] {method} seed {seed}: " + ", ".join(
        f"it {v['iteration']} ({v['panel']}): {v['successes']}/{v['episodes']}" for v in validations)
        + f" -> {path}", flush=True)
    return result


def check_panels(validations: list[dict[str, Any]], iterations: list[dict[str, Any]], pan: dict[str, Any]) -> None:
    """Every validation played exactly its panel's games, every training task is a pool game."""
    for v in validations:
        if [task for task, _ in v["outcomes"]] != pan["ids"][v["panel"]]:
            raise RuntimeError(f"validation at iteration {v['iteration']} did not play the {v['panel']} panel")
    pool = set(pan["ids"]["train"])
    for it in iterations:
        if not set(it["tasks"]) <= pool:
            raise RuntimeError(f"iteration {it['iteration']} trained on {sorted(set(it['tasks']) - pool)}, "
                               "outside the training pool")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=["gigpo", "scpo"],
                        help="methods to train, in order")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds (every method once per seed)")
    parser.add_argument("--grid", action="store_true", help="every (method, seed) of GRID: seeds 0..n-1 per method")
    parser.add_argument("--iterations", type=int, default=None, help="training iterations per run (default 12)")
    parser.add_argument("--val-every", type=int, default=6, help="validate every this many iterations (and at 0)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the LightningCLI config every run starts from")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help=f"per-run result files (default {RUNS}; with --dev {DEV_RUNS})")
    parser.add_argument("--dev", action="store_true", help="validate on the dev panel only (choosing the recipe)")
    parser.add_argument("--force", action="store_true", help="re-run runs whose result file has the same hash")
    parser.add_argument("--no-shared-zero", action="store_true",
                        help="validate iteration 0 in every run and check it against the seed's shared one")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny random model on the corridor world, 2 iterations: checks the pipeline, not learning")
    parser.add_argument("--report", action="store_true",
                        help="aggregate the runs into --out, its PNG and the tables; trains nothing")
    parser.add_argument("--out", type=Path, default=None, help=f"the report (default {RESULTS / 'learning.json'})")
    args, extra = parser.parse_known_args(argv)  # the rest goes to the training CLI, e.g. --model.lr=5e-5
    if args.smoke and args.iterations is not None:
        parser.error(f"argument --iterations: --smoke runs 2 iterations; remove --iterations {args.iterations} or --smoke")
    args.iterations = 12 if args.iterations is None else args.iterations
    if args.smoke:
        tmp = Path(tempfile.mkdtemp(prefix="learning_smoke_"))
        args.iterations, args.val_every = 2, 1
        args.runs_dir = args.runs_dir or tmp / "runs"
        args.out = args.out or tmp / "learning.json"  # never the published files
    args.runs_dir = args.runs_dir or (DEV_RUNS if args.dev else RUNS)
    args.out = args.out or RESULTS / ("learning_dev.json" if args.dev else "learning.json")
    args.log_dir = args.runs_dir.parent / "tensorboard" / "learning" if args.smoke else Path("runs/learning")
    if args.report:
        return report(args.runs_dir, args.out)
    if args.iterations % args.val_every:
        raise ValueError(f"--iterations {args.iterations} must be a multiple of --val-every {args.val_every}, "
                         "so that the last iteration is validated")
    base = smoke_config(args.runs_dir.parent / "smoke_model", args.config) if args.smoke else read_yaml(args.config)
    pan = panels(base)
    todo = grid_order() if args.grid else [(m, s) for s in args.seeds for m in args.methods]
    t0, done = time.perf_counter(), {}
    for method, seed in todo:
        result = run_one(method, seed, base, pan, args, extra)
        if result is not None:
            done[f"{method}_seed{seed}"] = result
    print(f"[learning] {len(done)} run(s) trained in {time.perf_counter() - t0:.0f} s; "
          f"{len(todo) - len(done)} already done", flush=True)
    return done


def grid_order() -> list[tuple[str, int]]:
    """GRID's runs seed by seed, the most-seeded methods first (gigpo, scpo: the question the grid
    asks), so that a grid stopped part way has paired runs of the same seeds to compare."""
    most = max(GRID.values())
    runs = [(m, s) for s in range(most) for m, n in GRID.items() if n == most and s < n]
    return runs + [(m, s) for s in range(most) for m, n in GRID.items() if n < most and s < n]


def report(runs_dir: Path, out: Path) -> dict[str, Any]:
    result = aggregate(runs_dir, GRID)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out.with_suffix(".png"))
    print_tables(result)
    print(ranking(result), end="\n\n")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return result


if __name__ == "__main__":
    main()
