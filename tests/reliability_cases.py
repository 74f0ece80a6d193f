"""The reliability probes: bad values a new user types, and odd requests to the embedded shop.

``issue``: #32 (probe as a new user would) or #33 item k. Each CLI probe is a dry run of
configs/quickstart.yaml with the arguments shown; ``says`` is what the one printed line must say
(a regular expression): the field, and for a refused value the value.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability_probes import Probe

SCPO = "callbacks.scpo.SCPOCallback"


def cli(issue: str, *args: str, status: int = 1, says: str, env: tuple = ()) -> Probe:
    return Probe(issue, "cli", args, status, says, env)


def scpo(issue: str, init_args: str, *, status: int = 1, says: str) -> Probe:
    """The quickstart with its callbacks replaced by one SCPOCallback with ``init_args`` (inline YAML)."""
    return cli(issue, "--trainer.callbacks", f"[{{class_path: {SCPO}, init_args: {init_args}}}]",
               status=status, says=says)


def module(issue: str, *args: str, status: int = 2, says: str) -> Probe:
    return Probe(issue, "module", args, status, says)


def shop(issue: str, method: str, path: str, form: dict | None = None, *, status: int, says: str) -> Probe:
    return Probe(issue, "shop", (method, path) if form is None else (method, path, form), status, says)


PROBES = [
    cli("control", status=0, says=r"^\[dry run\] nothing missing"),
    # ----------------------------------------------------------------- #32: bad values through the CLI
    cli("#32", "--model.lr", "nan", status=2, says=r"^error: model\.lr must be a number; got 'nan' \(YAML writes"),
    cli("#32", "--model.lr", ".nan", says=r"^error: model\.lr must be a finite number > 0; got nan"),
    cli("#32", "--model.lr", ".inf", says=r"^error: model\.lr must be a finite number > 0; got inf"),
    cli("#32", "--model.lr", "-1", says=r"^error: model\.lr must be .*got -1"),
    cli("#32", "--model.lr", "fast", status=2, says=r"^error: model\.lr must be a number; got 'fast'$"),
    cli("#32", "--model.top_p", "1.5", says=r"^error: model\.top_p must be"),
    cli("#32", "--model.temperature", "0", says=r"^error: model\.temperature must be"),
    cli("#32", "--model.max_new_tokens", "0", says=r"^error: model\.max_new_tokens must be"),
    cli("#32", "--model.max_new_tokens", "1e9", status=2, says=r"^error: model\.max_new_tokens must be an integer; got '1000000000\.0'"),
    cli("#32", "--model.kl_coef", "-0.01", says=r"^error: model\.kl_coef must be"),
    cli("#32", "--model.omega=-.inf", says=r"^error: model\.omega must be"),
    cli("#32", "--model.betas", "[0.9, 1.0]", says=r"^error: model\.betas must be"),
    cli("#32", "--model.grad_clip", "0", says=r"^error: model\.grad_clip must be"),
    cli("#32", "--model.grad_clip", ".inf", says=r"^error: model\.grad_clip must be a finite number"),
    cli("#32", "--model.dual_clip", ".inf", says=r"^error: model\.dual_clip must be a finite number"),
    cli("#32", "--model.estimator", "ppo", says=r"^error: model\.estimator"),
    cli("#32", "--model.engine", "sglang", says=r"^error: model\.engine must be"),
    cli("#32", "--model.torch_dtype", "float64", says=r"^error: model\.torch_dtype must be"),
    cli("#32", "--model.lora_rank", "-1", says=r"^error: model\.lora_rank must be"),
    cli("#32", "--model.old_logprobs", "engine", says=r"^error: model\.old_logprobs must be"),
    cli("#32", "--model.policy", "", says=r"^error: model\.policy must be"),
    cli("#32", "--data.group_size", "1", says=r"^error: data\.group_size must be"),
    cli("#32", "--data.groups_per_batch", "0", says=r"^error: data\.groups_per_batch must be"),
    cli("#32", "--data.env", "minecraft", says=r"^error: data\.env must be"),
    cli("#32", "--data.val_episodes", "100000", says=r"^error: data\.val_split='valid_seen' holds 48 tasks, but .*data\.val_episodes = 100000"),
    cli("#32", "--data.train_tasks", "5000", says=r"^error: data\.train_tasks=5000 but split 'train' has \d+ tasks"),
    cli("#32", "--data.step_timeout_s", ".inf", says=r"^error: data\.step_timeout_s must be"),
    cli("#32", "--data.workers", "-1", says=r"^error: data\.workers must be"),
    cli("#32", "--data.seed", "-1", says=r"^error: data\.seed must be"),
    cli("#32", "--data.train_split", "trän", says=r"^error: data\.train_split='trän': unknown ALFWorld split"),
    cli("#32", "--data.rollout.gamma", "1.5", says=r"^error: data\.rollout\.gamma must be"),
    cli("#32", "--data.rollout.max_steps", "0", says=r"^error: data\.rollout\.max_steps must be"),
    cli("#32", "--data.rollout.action_mode", "json", says=r"^error: data\.rollout\.action_mode must be"),
    cli("#32", "--data.env_options", "{sze: tiny}", says=r"^error: data\.env_options.*\['sze'\]"),
    cli("#32", "--data.env_options", "{size: huge}", says=r"^error: data\.env_options.*size='huge'"),
    cli("#32", "--data.env_options", "{data_path: /nonexistent/alf}", says=r"^error: .*data_path='/nonexistent/alf'"),
    cli("#32", "--data.no_such_setting", "1", status=2, says=r"^error: unrecognized arguments: --data\.no_such_setting 1$"),
    cli("#32", "--trainer.max_epochs", "-5", says=r"^error: `max_epochs` must be a non-negative integer or -1\. You passed in -5"),
    cli("#32", "--trainer.devices", "0", says=r"^error: `Trainer\(devices='0'\)` value is not a valid input"),
    cli("#32", "--trainer.precision", "7", status=2, says=r"^error: trainer\.precision: got '7'; expected .*'bf16-mixed'"),
    cli("#32", "--seed_everything", "abc", status=2, says=r"^error: seed_everything: got 'abc'; expected \[bool, int\]"),
    cli("#32", "--weights_only", "false", says=r"^error: --weights_only false"),
    scpo("#32", "{theta: 1.5}", says=r"^error: SCPOCallback\.theta=1\.5 must be"),
    scpo("#32", "{scorer: cosine}", says=r"^error: SCPOCallback\.scorer='cosine'"),
    scpo("#32", "{scorer: lexical, reference: middle}", says=r"^error: SCPOCallback\.reference='middle'"),
    # ----------------------------------------------------------------- #33: the twelve defects
    cli("#33.1", "--ckpt_path", "{tmp}/no-such.ckpt", says=r"^error: --ckpt_path=.*no-such\.ckpt.* no such file"),
    cli("#33.2", "--ckpt_path", "{tmp}/truncated.ckpt", says=r"^error: --ckpt_path=.*truncated\.ckpt.* not a complete"),
    cli("#33.2", "--ckpt_path", "{tmp}/not-a-checkpoint.ckpt", says=r"^error: --ckpt_path=.*not-a-checkpoint"),
    cli("#33.2", "--ckpt_path", "{tmp}/runs-code.ckpt", says=r"^error: --ckpt_path=.*runs-code\.ckpt.*restricted"),
    scpo("#33.3", "{scorer: lexical, alpha: .inf}", says=r"^error: SCPOCallback\.alpha=inf must be"),
    scpo("#33.3", "{scorer: lexical, tau_succ: .inf}", says=r"^error: SCPOCallback\.tau_succ must be a finite number"),
    scpo("#33.3", "{scorer: lexical, lam: .nan}", says=r"^error: SCPOCallback\.lam=nan must be"),
    scpo("#33.4", "{scorer: lexical, theta: high}", status=2, says=r"^error: trainer\.callbacks: SCPOCallback\.theta must be a number; got 'high'$"),
    scpo("#33.4", "{scorer: lexical, alhpa: 0.5}", status=2, says=r"^error: trainer\.callbacks: SCPOCallback takes no option 'alhpa' \(did you mean 'alpha'\?\)"),
    cli("#33.4", "--trainer.callbacks", "[{class_path: callbacks.scpo.SCPOCalback}]", status=2,
        says=r"^error: trainer\.callbacks: class_path 'callbacks\.scpo\.SCPOCalback': module 'callbacks\.scpo' has no attribute"),
    cli("#33.4", "--data.rollout", "{max_steps: many}", status=2,
        says=r"^error: data\.rollout: RolloutConfig\.max_steps must be an integer; got 'many'$"),
    cli("#33.4", "--data.env_options", "{size: tiny", status=2, says=r"^error: data\.env_options: '\{size: tiny' is not valid inline YAML"),
    cli("#33.4", "--trainer.callbacks", "[{class_path: callbacks.scpo.SCPOCallback", status=2,
        says=r"^error: trainer\.callbacks: .* is not valid inline YAML"),
    cli("#33.8", "--model.micro_batch_rows", "64", says=r"^error: model\.micro_batch_rows=64 .*mini_batch_rows=32"),
    cli("#33.8", "--data.rollout.exclude_actions", "[fly]", says=r"^error: data\.rollout\.exclude_actions.*'fly'"),
    scpo("#33.8", "{scorer: lexical, tau_succ: 10.0}", says=r"^error: SCPOCallback\.tau_succ=10\.0 is outside data\.env='alfworld'"),
    scpo("#33.8", "{scorer: lexical, tau_succ: -1.0}", says=r"^error: SCPOCallback\.tau_succ=-1\.0 is outside .*every one"),
    scpo("#32", "{scorer: lexical, tau_succ: 5.0}", status=0, says=r"^\[dry run\] nothing missing"),
    cli("#32", "--data.rollout.exclude_actions", "[look, go to]", status=0, says=r"^\[dry run\] nothing missing"),
    cli("#33.10", "--data.env", "webshop", "--data.val_split", "valid", "--data.rollout.exclude_actions", "[]",
        "--data.env_options", "{webshop_checkout: /nonexistent/WebShop}", says=r"^error: .*webshop_checkout="),
    # ----------------------------------------------------------------- #33 item 5-8: module entry points
    module("#33.5", "envs.alfworld.generate", "--split", "train", "--start", "10", "--end", "2", says=r"error: .*--end"),
    module("#33.5", "envs.webshop.generate", "--out", "{tmp}/shop", "--products", "0", says=r"error: .*--products"),
    module("#33.5", "benchmarks.numerics", "--rows", "0", says=r"error: .*--rows"),
    module("#33.5", "benchmarks.credit_math", "--repeats", "0", says=r"error: .*--repeats"),
    module("#33.6", "benchmarks.report", "--help", status=0, says=r"benchmarks.report|--help"),
    module("#33.6", "benchmarks.report", "--tables", says=r"error: .*--tables"),
    module("#33.7", "envs.webshop.site", "--port", "99999", says=r"error: .*--port"),
    module("#33.8", "benchmarks.learning", "--smoke", "--iterations", "5", says=r"error: .*--iterations"),
    # ----------------------------------------------------------------- the embedded shop's site
    shop("#32", "GET", "/", status=200, says=r"WebShop"),
    shop("#32", "GET", "/start/valid/0", status=200, says=r"Instruction"),
    shop("#32", "POST", "/s/{session}/act", {"search_query": ""}, status=200, says=r"^Empty search: type the words"),
    shop("#32", "POST", "/s/{session}/act", {"search_query": "shirt " * 17_000}, status=200,
         says=r"^Search query too long: 102000 characters, at most 1000"),
    shop("#33.7", "POST", "/s/{session}/act", {"search_query": "dark chocolate " * 66}, status=200, says=r"Total results"),
    shop("#32", "POST", "/s/{session}/act", {"search_query": "ünïcødé 商品 🛒"}, status=200, says=r"Total results"),
    shop("#32", "POST", "/s/{session}/act", {"action": "click[no such button]"}, status=200, says=r"Instruction"),
    shop("#32", "POST", "/s/{session}/act", {"action": "../../etc/passwd"}, status=200, says=r"Instruction"),
    shop("#32", "GET", "/start/valid/999999", status=404, says=r"999999|range|index"),
    shop("#32", "GET", "/start/nosplit/0", status=404, says=r"nosplit|split"),
    shop("#32", "GET", "/start/valid/-1", status=404, says=r"Not Found"),
    shop("#32", "GET", "/s/nosuchsession", status=404, says=r"no session nosuchsession"),
    shop("#32", "POST", "/s/nosuchsession/act", {"action": "click[buy now]"}, status=404, says=r"no session"),
    shop("#32", "GET", "/replay/..%2F..%2Fetc%2Fpasswd", status=404, says=r"Not Found|no such recorded"),
    shop("#32", "GET", "/replay/.env", status=404, says=r"no recorded episode"),
    shop("#32", "GET", "/replay/good?step=abc", status=200, says=r"step 0 of"),
    shop("#32", "GET", "/replay/good?step=-7", status=200, says=r"step 0 of"),
    shop("#33.7", "GET", "/replay/malformed", status=422, says=r"malformed\.json.*not a recorded episode"),
    shop("#33.7", "GET", "/replay/wrongkeys", status=422, says=r"wrongkeys\.json.*not a recorded episode"),
    shop("#32", "DELETE", "/", status=405, says=r"Method Not Allowed"),
    shop("#32", "PUT", "/s/x/act", status=405, says=r"Method Not Allowed"),
    shop("#32", "GET", "/no/such/page", status=404, says=r"Not Found"),
]


def prepare(tmp: Path) -> Path:
    """The files the probes name: checkpoints that are not loadable, recorded episodes. Returns
    the replay folder for the shop."""
    import torch

    torch.save({"state_dict": {"w": torch.zeros(64, 64)}, "epoch": 1}, tmp / "whole.ckpt")
    data = (tmp / "whole.ckpt").read_bytes()
    (tmp / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (tmp / "not-a-checkpoint.ckpt").write_text("epoch: 1\nthis is a YAML file\n")
    torch.save({"state_dict": {}, "loops": _Opens(str(tmp / "code-ran"))}, tmp / "runs-code.ckpt")
    replays = tmp / "replays"
    replays.mkdir()
    (replays / "good.json").write_text(json.dumps({"split": "valid", "index": 0, "actions": ["search[shirt]"]}))
    (replays / "malformed.json").write_text('{"split": "valid", "index": 0, "actions": [')
    (replays / "wrongkeys.json").write_text(json.dumps({"split": "valid", "steps": []}))
    return replays


class _Opens:
    """Unpickling this opens a file: code a checkpoint must never run."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")
