"""Small array helpers shared by the credit math: input coercion and group ids."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch


def to_numpy(x: Any, name: str, dtype=np.float64) -> np.ndarray:
    """A 1-D numpy copy of a sequence, numpy array or tensor; ``name`` goes into the error."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D (one entry per row); got shape {arr.shape}")
    return arr


def like_input(values: np.ndarray, template: Any) -> Any:
    """Return ``values`` as a tensor (same dtype and device) when ``template`` is one."""
    if isinstance(template, torch.Tensor):
        dtype = template.dtype if template.is_floating_point() else torch.float32
        return torch.as_tensor(values, dtype=dtype, device=template.device)
    return values


def factorize(keys: Iterable[Any], name: str) -> tuple[np.ndarray, int]:
    """Integer codes 0..k-1 for hashable keys, in order of first appearance, and k.

    Keys compare exactly (strings are case- and whitespace-sensitive), as the GiGPO anchor
    grouping requires (SPEC §2.5). Integer arrays are factorised by sorting; anything else
    through a dict (C-level ``dict.fromkeys`` and ``map``: no Python code per row).
    """
    if isinstance(keys, torch.Tensor):
        keys = keys.detach().cpu().numpy()
    if isinstance(keys, np.ndarray) and keys.ndim == 1 and keys.dtype.kind in "iub":
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        code_of = np.empty(len(distinct), dtype=np.int64)
        code_of[np.argsort(first)] = np.arange(len(distinct))  # sorted order -> first appearance
        return code_of[inverse.reshape(-1)], len(distinct)
    if not isinstance(keys, (np.ndarray, Sequence)):
        keys = list(keys)  # an iterator (e.g. a zip of ids and anchors) is read twice below
    try:
        code_of = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    except TypeError as exc:
        raise TypeError(f"`{name}` entries must be hashable (ids or strings): {exc}") from None
    return np.fromiter(map(code_of.__getitem__, keys), dtype=np.int64), len(code_of)


def check_lengths(**arrays: Any) -> int:
    """All arguments must have one entry per row; returns the row count."""
    sizes = {name: len(a) for name, a in arrays.items()}
    if len(set(sizes.values())) > 1:
        detail = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(f"per-row inputs must have the same length; got {detail}")
    return next(iter(sizes.values()), 0)
