"""Generation engines for rollouts: HF ``generate`` (CPU and GPU) and vLLM (``engines.vllm``); ``engines.factory`` builds them."""

from scpo_lightning.engines.base import Generation, RolloutEngine, SamplingParams

__all__ = ["Generation", "RolloutEngine", "SamplingParams"]
