"""Cross-rank arithmetic for the data-parallel layout: tiny collectives, no-ops on one process.

Every rank collects and shapes its own groups, so the credit math never talks to other ranks.
What does cross ranks is bookkeeping: agreeing on how many forward/backward passes each rank
runs (FSDP's collectives pair up pass by pass, so every rank must run the same number) and the loss
weights that make a sharded update equal the single-process one. The logged metrics' reductions
live with their definitions in ``scpo_lightning/metrics.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


#: Called by ``finish`` after the last barrier, before the default group is destroyed (``before_finish``).
_CLOSERS: list[Callable[[], None]] = []


def before_finish(close: Callable[[], None]) -> None:
    """Register ``close`` to run in ``finish`` while the default process group still exists (an
    engine's own process groups must be destroyed before it: vLLM's are, ``engines/vllm.py``)."""
    _CLOSERS.append(close)


def finish() -> None:
    """Let all ranks end together and close the process group (no-op on one process).

    Without it, a rank that reaches the end of the program while another still works (rank 0
    exporting the policy, say) aborts in gloo's teardown ("terminate called without an active
    exception"), and torchrun then reports the whole run as failed.
    """
    if is_distributed():
        dist.barrier()
        while _CLOSERS:
            _CLOSERS.pop()()
        if dist.is_initialized():  # a closer may have destroyed it with its own groups
            dist.destroy_process_group()


def all_reduce(values: Sequence[float], op: str, device: torch.device | str = "cpu") -> list[float]:
    """Element-wise ``sum`` or ``max`` of ``values`` over ranks (float64; NCCL needs a CUDA ``device``)."""
    if not is_distributed():
        return [float(v) for v in values]
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=ops[op])
    return t.tolist()


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (pickled; for small per-iteration summaries)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def shard_bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of part ``index`` when ``n`` items are cut into ``parts`` contiguous parts
    whose sizes differ by at most one (the first ``n % parts`` parts get the extra item)."""
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


#: Per optimizer step: this rank's micro-batches of row indices (None = an idle pass) and the
#: number of real micro-batches over all ranks (``update_plan``).
Plan = list[tuple[list[list[int] | None], float]]


def update_plan(n: int, mini_batch_rows: int, micro_batch_rows: int, device: torch.device | str = "cpu") -> Plan:
    """The PPO epoch as all ranks agree on it (collective): per optimizer step, this rank's
    micro-batches of row indices (None = an idle pass) and the number of real micro-batches over
    all ranks.

    ``mini_batch_rows`` counts rows over all ranks: N rows in total make ceil(N / mini_batch_rows)
    optimizer steps, and each rank cuts its n rows into that many contiguous, near-equal chunks,
    so every step mixes all ranks' rows (on one device: near-equal mini-batches). Every rank gets
    as many micro-batches per step as the rank with the most, padded with idle passes. A step
    that no rank has a row for (only with fewer rows per rank than steps) is not taken.
    """
    (total,) = all_reduce([n], "sum", device)
    steps = math.ceil(total / mini_batch_rows)
    if steps == 0:
        return []
    chunks = [range(*shard_bounds(n, steps, k)) for k in range(steps)]
    micros = [[list(c[j : j + micro_batch_rows]) for j in range(0, len(c), micro_batch_rows)] for c in chunks]
    agreed = all_reduce([len(m) for m in micros], "max", device)
    real = all_reduce([len(m) for m in micros], "sum", device)
    return [(m + [None] * (int(a) - len(m)), r) for m, a, r in zip(micros, agreed, real) if r > 0]
