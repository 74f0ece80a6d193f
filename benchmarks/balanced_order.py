"""Does ``order: balanced`` credit the same steps as the published code? Measured on recorded batches.

The published rule: verl-agent 796ed31 reorders every batch with ``balance_batch``, i.e.
``get_seqlen_balanced_partitions(token lengths, K, equal_size=True)`` over the rows as it lists
them (each trajectory's steps together), and SCPO takes a failed sibling's steps in that order.
That function is read from a verl-agent source file given by ``--published`` or the environment
variable ``VERL_SEQLEN_BALANCING`` (e.g. ``git --git-dir=<verl-agent> show
796ed31:verl/utils/seqlen_balancing.py > /tmp/seqlen_balancing.py``); only its two partition
functions are loaded (they need nothing but ``heapq``), nothing of it is copied here.

For each recorded ALFWorld batch (``benchmarks.record_batches``; the quickstart's SCPO settings
and scorer; batches repeating an earlier one left out, as in ``benchmarks.shaper_cost``) the pairs
are scored once and every failed sibling is matched under each order with those same scores. A
row "differs" when its credit r differs from the one the published rule gives it. Orders:

- ``ours``: ``processing_order("balanced", ...)``, what training runs;
- ``published_function_on_step_major_rows``: the published function applied to the rows in our
  collector's step-major layout (what the row-layout part of the SPEC §3.7 amendment changes);
- ``chronological``: no reordering (how much the order matters at all).

The published trainer pads a batch whose rows are not a multiple of K with duplicated random rows
(SPEC §2.9), which no deterministic rule reproduces; there both sides pad with zero-length rows
(``ordering.karmarkar_karp``) and the result counts such batches apart.

    VERL_SEQLEN_BALANCING=/tmp/seqlen_balancing.py python -m benchmarks.balanced_order
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import heapq
import itertools
import os
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import DATA, RESULTS, machine, write_result
from benchmarks.record_batches import load_batches
from benchmarks.shaper_cost import rollouts_key, scpo_settings
from scpo_lightning.ordering import processing_order, trajectory_major
from scpo_lightning.credit import apply_plan
from scpo_lightning.shaper import plan_shaping

ENV_VAR = "VERL_SEQLEN_BALANCING"
Partitioner = Callable[[list[int], int], list[list[int]]]


def load_published(path: str | Path) -> Partitioner:
    """verl-agent's ``get_seqlen_balanced_partitions(lengths, k, equal_size=True)`` from its source file.

    Only the module's ``karmarkar_karp`` and ``get_seqlen_balanced_partitions`` definitions are
    executed (with ``heapq`` and ``typing``), not its imports (torch, torch.distributed).
    """
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    wanted = {"karmarkar_karp", "get_seqlen_balanced_partitions"}
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted]
    if {d.name for d in defs} != wanted:
        raise ValueError(f"{path} does not define {sorted(wanted)}: not verl's seqlen_balancing.py")
    namespace: dict[str, Any] = {"heapq": heapq, "List": typing.List, "Tuple": typing.Tuple}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    partitions = namespace["get_seqlen_balanced_partitions"]
    return lambda lengths, k: partitions(list(lengths), k, True)


def published_partitions(published: Partitioner, lengths: list[int], k: int) -> list[list[int]]:
    """The published partitions, extended as ours to N not a multiple of K: zero-length rows appended, then dropped."""
    n = len(lengths)
    padded = list(lengths) + [0] * ((-n) % k)
    return [[i for i in part if i < n] for part in published(padded, k)]


def published_order(published: Partitioner, lengths: Any, k: int, layout: np.ndarray) -> np.ndarray:
    """Position -> batch row under the published balancer, with the rows numbered by ``layout``."""
    parts = published_partitions(published, np.asarray(lengths)[layout].tolist(), k)
    return layout[np.fromiter(itertools.chain.from_iterable(parts), dtype=np.int64, count=len(layout))]


def credit_under(plan: Any, scores: np.ndarray, config: Any, perm: np.ndarray) -> np.ndarray:
    """The credit r per row when failed siblings' steps are taken in the batch order ``perm``."""
    rank = np.empty(len(perm), dtype=np.int64)
    rank[perm] = np.arange(len(perm))
    blocks = [dataclasses.replace(b, order=np.argsort(rank[b.rows], kind="stable")) for b in plan.blocks]
    return apply_plan(dataclasses.replace(plan, blocks=blocks), scores, config).credit


def measure(env: str, data_dir: Path, published: Partitioner | None) -> dict[str, Any]:
    from callbacks.scpo import SCPOCallback
    from scpo_lightning.scorers import make_scorer

    settings = scpo_settings(env)
    callback = SCPOCallback(**settings)
    config, k = callback.config, callback.config.order_partitions
    scorer = make_scorer(callback.scorer_name, **callback.scorer_options)
    per_batch, seen = [], set()
    for name, batch in load_batches(env, data_dir):
        key = rollouts_key(batch)
        if key in seen:
            continue
        seen.add(key)
        n, lengths = len(batch), batch.lengths
        plan = plan_shaping(group_ids=batch.group_ids, traj_ids=batch.traj_ids, steps=batch.steps,
                            traj_returns=batch.traj_returns, actions=batch.actions, observations=batch.observations,
                            is_action_valid=batch.is_action_valid, noop=batch.noop, lengths=lengths, config=config)
        scores = np.asarray(scorer.score(plan.pairs), dtype=np.float64) if plan.pairs else np.zeros(0)
        orders = {"ours": processing_order("balanced", lengths, n, k, traj_ids=batch.traj_ids, steps=batch.steps),
                  "chronological": np.arange(n, dtype=np.int64)}
        if published is not None:
            orders["published"] = published_order(published, lengths, k, trajectory_major(batch.traj_ids, batch.steps))
            orders["published_function_on_step_major_rows"] = published_order(
                published, lengths, k, np.arange(n, dtype=np.int64))
        credit = {label: credit_under(plan, scores, config, perm) for label, perm in orders.items()}
        entry: dict[str, Any] = {"file": name, "rows": n, "multiple_of_k": n % k == 0,
                                 "credited_rows": {label: int(np.count_nonzero(c)) for label, c in credit.items()}}
        if published is not None:
            entry["rows_differing_from_published"] = {
                label: int(np.count_nonzero(c != credit["published"])) for label, c in credit.items()
                if label != "published"}
            entry["same_permutation_as_published"] = bool(np.array_equal(orders["ours"], orders["published"]))
        per_batch.append(entry)
    out: dict[str, Any] = {"settings": settings, "batches": per_batch}
    if published is not None:
        labels = per_batch[0]["rows_differing_from_published"] if per_batch else {}
        out["rows_differing_from_published"] = {
            subset: {label: sum(b["rows_differing_from_published"][label] for b in rows) for label in labels}
            for subset, rows in (("all_batches", per_batch),
                                 ("batches_multiple_of_k", [b for b in per_batch if b["multiple_of_k"]]))}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--published", default=os.environ.get(ENV_VAR),
                        help=f"verl-agent 796ed31 verl/utils/seqlen_balancing.py (default: ${ENV_VAR})")
    parser.add_argument("--data-dir", type=Path, default=DATA, help="recorded batches: <data-dir>/alfworld/")
    parser.add_argument("--out", type=Path, default=RESULTS / "balanced_order.json", help="JSON result file")
    args = parser.parse_args(argv)
    if not args.published:
        print(f"warning: no verl-agent source (--published / ${ENV_VAR}): only ours vs chronological is measured")
    published = load_published(args.published) if args.published else None
    result = {
        "what": "rows whose SCPO credit differs from the published balanced order's (verl-agent 796ed31 balance_batch)",
        "published_source": args.published,
        "published_sha256": hashlib.sha256(Path(args.published).read_bytes()).hexdigest() if args.published else None,
        "alfworld": measure("alfworld", args.data_dir, published),
        "machine": machine(),
    }
    write_result("balanced_order", result, args.out)


if __name__ == "__main__":
    main()
