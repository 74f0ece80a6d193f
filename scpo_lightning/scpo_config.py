"""SCPO's shaping settings and the rule for where a group's reference comes from (SPEC §3, §7).

Pure: no Lightning, no scorer. ``scpo_lightning.shaper`` plans a batch with them and
``scpo_lightning.credit`` turns the plan's scores into credit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scpo_lightning.ordering import ORDERS
from scpo_lightning.scpo import THETA_RANGE, theta_in_range

REFERENCES = ("longest", "shortest", "random")
#: Where a group's reference comes from: ``reference_kind`` says it precisely.
REFERENCE_SOURCES = ("siblings", "buffer", "both")


@dataclass(frozen=True)
class SCPOConfig:
    """SCPO shaping settings (defaults: the ALFWorld recipe, SPEC §3 and §7).

    Args:
        alpha: Weight α of the SCPO credit added to failed siblings' step returns (ALFWorld 0.5, WebShop 1.0).
        theta: Similarity threshold θ in (0, 1) for a step to match a reference position.
        lam: Soft base λ in [0, θ): credit is max(0, M - λ) / (1 - λ).
        tau_succ: A trajectory is a success when its total env reward exceeds this (ALFWorld 0, WebShop 9.0).
        reference: Which successful sibling is the reference: longest (paper), shortest or random.
        order: Processing order of failed steps: balanced (paper), chronological or random.
        order_partitions: K, the number of partitions of the balanced order (the published runs had 4 ranks).
        monotonic: Credit each reference position at most once (False = the repeated-credit ablation).
        reference_source: siblings (paper: a successful sibling of the group), buffer (only successes of the same task from earlier iterations) or both (a sibling when the group has a success, else the buffer).
        separator: Text between action and observation in a step text (action || observation).
    """

    alpha: float = 0.5
    theta: float = 0.6
    lam: float = 0.4
    tau_succ: float = 0.0
    reference: str = "longest"
    order: str = "balanced"
    order_partitions: int = 4
    monotonic: bool = True
    reference_source: str = "siblings"
    separator: str = " || "

    def __post_init__(self) -> None:
        # Each message starts with the field name: SCPOCallback prefixes its own class to it.
        # The comparisons are written so that NaN fails them too.
        checks = [
            (0 <= self.alpha < math.inf,
             f"alpha={self.alpha} must be a finite number >= 0 (it weighs the credit: ALFWorld 0.5, WebShop 1.0)"),
            (theta_in_range(self.theta),
             f"theta={self.theta} must be in {THETA_RANGE} (the similarity a step needs; paper: 0.6)"),
            (0 <= self.lam < self.theta,
             f"lam={self.lam} must be in [0, theta={self.theta}) (credit is max(0, M - lam) / (1 - lam); paper: 0.4)"),
            (self.reference in REFERENCES, f"reference={self.reference!r} must be one of {REFERENCES}"),
            (self.order in ORDERS, f"order={self.order!r} must be one of {ORDERS}"),
            (self.order_partitions >= 1, f"order_partitions={self.order_partitions} must be >= 1"),
            (self.reference_source in REFERENCE_SOURCES,
             f"reference_source={self.reference_source!r} must be one of {REFERENCE_SOURCES}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def reference_kind(has_success: bool, has_buffered: bool, source: str) -> str | None:
    """Where a group's reference comes from, for ``SCPOConfig.reference_source``.

    siblings: a successful sibling, or none (the paper). buffer: a buffered success of the
    task from an earlier iteration, or none, whether or not the group has a success of its own.
    both: a successful sibling when there is one (the current policy's own success wins), else a
    buffered one. Returns "sibling", "buffer" or None (the group is left unchanged).
    """
    if has_success and source != "buffer":
        return "sibling"
    if has_buffered and source != "siblings":
        return "buffer"
    return None


def looks_in_buffer(has_success: bool, source: str) -> bool:
    """Whether the group asks the buffer (the denominator of the buffer's hit rate)."""
    return source == "buffer" or (source == "both" and not has_success)
