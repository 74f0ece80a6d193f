"""Records, while HF ``generate`` samples, the log-prob of each drawn token under a step's scores."""

from __future__ import annotations

import torch
from transformers import LogitsProcessor


class TokenLogprobRecorder(LogitsProcessor):
    """Records ``log_softmax(scores / temperature)`` at each sampled token, leaving scores untouched.

    A processor sees a step's scores before its token is drawn; the token appears as the last
    column of ``input_ids`` at the next call (or in the final sequences, ``finish``), so only the
    current step's log-softmax row is held, never the whole [steps, batch, vocab] history.
    """

    def __init__(self, temperature: float = 1.0):
        self.temperature = temperature
        self._pending: torch.Tensor | None = None
        self._values: list[torch.Tensor] = []

    def _flush(self, tokens: torch.Tensor) -> None:
        if self._pending is not None:
            self._values.append(self._pending.gather(-1, tokens[:, None]).squeeze(-1))
            self._pending = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._flush(input_ids[:, -1])
        self._pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[batch, new tokens] log-probs, given the generated sequences (prompt columns included)."""
        self._flush(sequences[:, -1])
        steps = len(self._values)
        return torch.stack(self._values, dim=1) if steps else sequences.new_zeros((len(sequences), 0), dtype=torch.float32)
