"""The paper's scorer: the BGE cross-encoder (bge-reranker-v2-m3), through FlagEmbedding or transformers.

Two backends give the same scores (``scorer_options.backend``, chosen in the config, never by
what happens to import): ``flagembedding`` runs FlagEmbedding's FlagReranker (transformers < 5,
the `bge` extra); ``transformers`` runs ``bge_transformers.TransformersReranker``, FlagReranker's
steps on plain transformers, so the scorer also works next to vLLM (transformers >= 5).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envs.common.packages import check_all, require
from scpo_lightning.scorers.base import ScorerRules, check_batching, option_value

#: ``scorer_options.backend`` -> the package it imports and how to install it.
BACKENDS = {
    "flagembedding": ("FlagEmbedding", "pip install -e '.[bge]' (needs transformers < 5, so not next to vLLM)"),
    "transformers": ("transformers", "pip install transformers (the project's dependency; any version vLLM brings)"),
}


def check_backend(backend: str) -> None:
    """A backend outside ``BACKENDS``, or one whose package cannot be found, fails naming the field."""
    if backend not in BACKENDS:
        raise ValueError(f"scorer_options.backend={backend!r}: choose one of {sorted(BACKENDS)} "
                         "(flagembedding: FlagReranker itself; transformers: the same scores without FlagEmbedding)")
    package, install = BACKENDS[backend]
    other = "transformers" if backend == "flagembedding" else "flagembedding"
    require(f"scorer_options.backend={backend}", package, f"{install}; or set scorer_options.backend: {other}")


def check_bge_options(options: Mapping[str, Any]) -> None:
    """Start-up check of ``scorer: bge`` (before any model loads): the backend's package and the model
    folder, both (``packages.check_all``: --dry_run lists each that is missing)."""
    check_all(lambda: check_backend(options.get("backend", "flagembedding")),
              lambda: _check_model_dir(options.get("model_dir")))


def _check_model_dir(model_dir: Any) -> None:
    if not model_dir or not (Path(model_dir).expanduser() / "config.json").is_file():
        raise FileNotFoundError(
            f"SCPOCallback.scorer_options.model_dir={model_dir!r} is not a local model folder; point it at a "
            "downloaded BAAI/bge-reranker-v2-m3 (nothing is fetched at run time), or use scorer: minilm")


def check_max_length(path: Path, max_length: int) -> None:
    """Refuse a max_length beyond the model's positions: FlagEmbedding's batch-size probe takes
    the resulting RuntimeError for out-of-memory, shrinks the batch to 0 and then fails with an
    unrelated IndexError (on CUDA after a device-side assert)."""
    config = json.loads((path / "config.json").read_text())
    positions = config.get("max_position_embeddings")
    if positions is None:
        return
    # RoBERTa-family models (bge-reranker-v2-m3 is XLM-RoBERTa) start positions after the pad id.
    usable = positions - (config.get("pad_token_id", 1) + 1 if "roberta" in config.get("model_type", "") else 0)
    if max_length > usable:
        raise ValueError(f"scorer_options.max_length={max_length} exceeds the {usable} token positions of the "
            f"model in {path}; lower it")


class BGEScorer(ScorerRules):
    """Sigmoid-normalised FlagReranker scores of (reference, candidate) step-text pairs.

    Args:
        model_dir: Local directory of a FlagEmbedding encoder-only reranker, e.g. a saved
            ``BAAI/bge-reranker-v2-m3`` (the paper's scorer). Nothing is downloaded.
        backend: Who computes the scores: ``flagembedding`` (FlagReranker; the `bge` extra, which
            needs transformers < 5) or ``transformers`` (the same steps on plain transformers, equal
            to FlagReranker's scores to 1e-5; the choice next to vLLM, whose transformers is >= 5).
        device: Torch device to score on; default the current CUDA device (under Lightning, the rank's own
            GPU) when CUDA is available, else ``cpu``.
        batch_size: Pairs per forward pass.
        max_length: Token limit of one (reference, candidate) pair; the reference side is cut
            to 3/4 of it and the candidate fills the rest (FlagEmbedding's rule).
        use_fp16: Run in half precision; only honoured on CUDA (CPU half matmuls are slow or
            unsupported), default on for CUDA as in the paper's setup.
        field: Config field name quoted in error messages (where ``model_dir`` came from).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        backend: str = "flagembedding",
        device: str | None = None,
        batch_size: int = 128,
        max_length: int = 512,
        use_fp16: bool = True,
        field: str = "scorer_options.model_dir",
    ) -> None:
        check_backend(backend)
        path = Path(model_dir).expanduser()
        # FlagEmbedding would treat a missing path as a Hub repo id and fail with an unrelated
        # network/repo-name error, so check the directory ourselves first.
        if not path.is_dir():
            raise FileNotFoundError(
                f"{field}={str(model_dir)!r}: no such directory. Point {field} at a local copy "
                "of BAAI/bge-reranker-v2-m3 (a folder with config.json, the tokenizer files and "
                "the weights), or choose `scorer: minilm` / `scorer: lexical`, which need none."
            )
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{field}={str(model_dir)!r} has no config.json: it is not a saved Hugging Face "
                "model folder (save one with model.save_pretrained + tokenizer.save_pretrained)."
            )
        check_max_length(path, max_length)
        check_batching(batch_size, max_length)
        import torch

        if device is None:  # each rank's own GPU: Lightning sets the current device before callbacks' setup
            device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        self.device, self.backend = device, backend
        self.use_fp16 = bool(use_fp16) and device.startswith("cuda")
        if backend == "transformers":
            from scpo_lightning.scorers.bge_transformers import TransformersReranker

            self._reranker = TransformersReranker(path, device=device, batch_size=batch_size, max_length=max_length,
                                                  use_fp16=self.use_fp16)
            return
        try:
            from FlagEmbedding import FlagReranker
        except ImportError as exc:  # found but broken, e.g. transformers 5 next to it
            raise ImportError(f"scorer_options.backend=flagembedding: FlagEmbedding does not import here ({exc}); "
                              "set scorer_options.backend: transformers for the same scores without it") from exc
        # One explicit device: with devices=None FlagEmbedding spawns one worker process per
        # visible GPU, which would fight the trainer for the GPUs.
        self._reranker = FlagReranker(
            str(path),
            use_fp16=self.use_fp16,
            devices=[device],
            batch_size=batch_size,
            max_length=max_length,
            normalize=True,
        )

    @classmethod
    def check_config(cls, options: Mapping[str, Any], run: Mapping[str, Any]) -> None:
        """The constructor's value checks, then the backend's package and the model folder (both
        listed by the dry run when this machine lacks them)."""
        value = option_value(cls, run)
        model_dir = run.get("model_dir")
        if model_dir and (Path(model_dir).expanduser() / "config.json").is_file():
            check_max_length(Path(model_dir).expanduser(), value("max_length"))
        check_batching(value("batch_size"), value("max_length"))
        check_bge_options(options)

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if len(pairs) == 0:
            return np.empty(0, dtype=np.float64)
        if self.backend == "transformers":
            return self._reranker.score(pairs)
        scores = self._reranker.compute_score([[ref, cand] for ref, cand in pairs])
        return np.asarray(scores, dtype=np.float64).reshape(len(pairs))
