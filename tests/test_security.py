"""Security: the shop's server binds localhost, checkpoints load weights-only, no remote code unless
configured, and model text is never evaluated by an env."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
import yaml

from envs.registry import make_env_factory
from scpo_lightning.prompts import project_action, prompt_style
from scpo_lightning.testing import build_tiny_llama
from tests.conftest import require
from tests.test_cli import ROOT, quickstart_on_corridor


# --------------------------------------------------------------------------- the shop's server
def test_webshop_site_binds_localhost_unless_told(monkeypatch):
    require("flask", extra="webshop")
    require("Stemmer", extra="webshop")
    import flask

    from envs.webshop import site

    calls = []
    monkeypatch.setattr(flask.Flask, "run", lambda self, **kw: calls.append(kw))
    site.main(["--port", "3999"])
    site.main(["--host", "0.0.0.0", "--port", "3999"])
    assert [(c["host"], c["port"]) for c in calls] == [("127.0.0.1", 3999), ("0.0.0.0", 3999)]


# --------------------------------------------------------------------------- checkpoints
def _corridor_config(tmp_path: Path) -> Path:
    """The quickstart on the corridor world, one iteration, no validation or export: a checkpoint fast."""
    path = quickstart_on_corridor(tmp_path)
    config = yaml.safe_load(path.read_text())
    config["data"]["workers"] = 0
    config["trainer"].update(num_sanity_val_steps=0, check_val_every_n_epoch=100)
    config["trainer"]["callbacks"] = [cb for cb in config["trainer"]["callbacks"]
                                      if not cb["class_path"].endswith("HFExport")]
    path.write_text(yaml.safe_dump(config))
    return path


class _RunsCodeWhenUnpickled:
    """A checkpoint entry whose unpickling opens (creates) ``path``: any code would run the same way."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real checkpoint of train.py (in this process), and its config."""
    import train

    tmp = tmp_path_factory.mktemp("ckpt")
    config = _corridor_config(tmp)
    train.main(["fit", "--config", str(config)])
    return tmp / "ckpt" / "last.ckpt", config


def test_our_checkpoints_hold_only_what_weights_only_loading_accepts(trained):
    checkpoint = torch.load(trained[0], map_location="cpu", weights_only=True)  # raises on any other object
    assert checkpoint["state_dict"] and checkpoint["optimizer_states"] and checkpoint["callbacks"]
    assert "RolloutDataModule" in checkpoint and "scpo_state" in checkpoint  # numpy RNG states, engine state


def test_resume_refuses_a_checkpoint_that_would_run_code(trained, tmp_path, monkeypatch):
    """``--ckpt_path last`` (the resume path) on a tampered last.ckpt. LightningCLI pre-reads only a
    file path given literally, so "last" reaches the trainer's own load: train.py must ask it for
    weights_only, even in an environment that switched torch's default off."""
    import train

    config = yaml.safe_load(trained[1].read_text())
    for cb in config["trainer"]["callbacks"]:
        if cb["class_path"].endswith("ModelCheckpoint"):
            cb["init_args"]["dirpath"] = str(tmp_path / "ckpt")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    good = torch.load(trained[0], map_location="cpu", weights_only=True)
    marker = tmp_path / "code-ran"
    (tmp_path / "ckpt").mkdir()
    torch.save({**good, "loops": _RunsCodeWhenUnpickled(marker)}, tmp_path / "ckpt" / "last.ckpt")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        train.main(["fit", "--config", str(tmp_path / "config.yaml"), "--ckpt_path", "last", "--trainer.max_epochs", "2"])
    assert not marker.exists(), "unpickling the checkpoint ran code"


# --------------------------------------------------------------------------- remote code
def _model_with_remote_code(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny Llama whose config and tokenizer config also name code in the folder (auto_map)."""
    directory = build_tiny_llama(tmp_path / "tiny")
    marker = tmp_path / "remote-code-ran"
    (directory / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('remote code ran')\n")
    for name, key in (("config.json", "AutoModelForCausalLM"), ("tokenizer_config.json", "AutoTokenizer")):
        data = json.loads((directory / name).read_text())
        data["auto_map"] = {key: "evil.Evil", "AutoConfig": "evil.EvilConfig"}
        if name == "tokenizer_config.json":
            data["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
        (directory / name).write_text(json.dumps(data))
    return directory, marker


def test_policy_runs_no_code_from_the_model_folder_unless_configured(tmp_path):
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.policy import load_policy

    directory, marker = _model_with_remote_code(tmp_path)
    assert SCPOModule(policy=str(directory)).hparams.trust_remote_code is False  # the config default
    model, tokenizer = load_policy(str(directory))
    assert type(model).__name__ == "LlamaForCausalLM" and tokenizer.eos_token
    assert not marker.exists(), "loading the policy ran code from its folder"


def test_no_source_file_turns_remote_code_on_by_itself():
    offenders = []
    for folder in ("scpo_lightning", "callbacks", "envs", "scripts", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.keyword) and node.arg == "trust_remote_code" and (
                        isinstance(node.value, ast.Constant) and node.value.value is True):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.value.lineno}")
    assert not offenders, f"trust_remote_code=True hard-coded at {offenders}"


# --------------------------------------------------------------------------- model text is data
PAYLOADS = [
    "__import__('pathlib').Path({m!r}).touch()",
    "exec(\"open({m!r}, 'w').close()\")",
    "open({m!r}, 'w').close()",
    "$(touch {m}); `touch {m}`; touch {m}",
    "{{{{ ''.__class__.__mro__[1].__subclasses__() }}}} {{0.__class__}} %(x)s",
    "search[__import__('os').system('touch {m}')]",
    "click[__import__('pathlib').Path({m!r}).touch()]",
    "go to __import__('os').system('touch {m}')",
]
#: Calls that turn text into code or shell commands; none may appear where model text flows.
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_CALLS = {("os", "system"), ("os", "popen"), ("pickle", "loads"), ("marshal", "loads")}


def _texts(marker: Path) -> list[str]:
    raw = [p.format(m=str(marker)) for p in PAYLOADS]
    return raw + [f"<think>run it</think><action>{t}</action>" for t in raw]


@pytest.mark.parametrize("env, options", [("corridor", {}), ("webshop", {}),
                                          ("alfworld", {"source": "generated", "size": "small"})])
def test_env_steps_never_run_model_text(env, options, tmp_path):
    if env != "corridor":
        require({"webshop": "Stemmer", "alfworld": "alfworld"}[env], extra=env)
    if env == "alfworld":
        options = {**options, "cache_dir": str(tmp_path / "games")}
    marker = tmp_path / "model-text-ran"
    instance = make_env_factory(env, {**options, "max_steps": 1000})()
    instance.reset("train", 0)
    family = "webshop" if env == "webshop" else "alfworld"
    for text in _texts(marker):
        instance.step(project_action(text, prompt_style(family, "prompts")).action)
        instance.step(text)  # the raw text too, unprojected
    instance.close()
    assert not marker.exists(), f"{env}: an action was executed as code"


def test_env_worker_processes_never_run_model_text(tmp_path):
    from envs.workers import EnvPool

    marker = tmp_path / "model-text-ran"
    with EnvPool(make_env_factory("corridor", {"max_steps": 1000}), 2, num_workers=2) as pool:
        pool.reset([("train", 0)], 2)
        for text in _texts(marker):
            out = pool.step([project_action(text, prompt_style("alfworld", "prompts")).action, text])
            assert all(r is not None and "failure" not in r.info for r in out.results)
    assert not marker.exists(), "an env worker executed an action as code"


def test_no_code_evaluation_where_model_text_flows():
    """Static guard for the paths an action takes: projection, rollout, the pool, every env."""
    files = [ROOT / "scpo_lightning" / n for n in ("prompts.py", "rollout.py")] + sorted((ROOT / "envs").rglob("*.py"))
    offenders = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            builtin = isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS
            module_call = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                           and (func.value.id, func.attr) in FORBIDDEN_CALLS)
            shell = any(k.arg == "shell" and getattr(k.value, "value", False) for k in node.keywords)
            if builtin or module_call or shell:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(func)}")
    assert not offenders, offenders
