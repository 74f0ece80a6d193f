"""Prefix-shared prefill: every distinct prefix of a generation batch's prompts is encoded once.

Why. The K siblings of a group start from the same prompt, and every prompt of a step starts with
the same chat template and instructions: on the recorded quickstart batches a prefix tree over each
step's prompts holds 49 % of their tokens (ALFWorld) and 69 % (WebShop). Prefill is the largest
part of generation on CPU, so encoding each tree node once and copying its keys and values into
every row that shares it removes half of it.

How. ``PrefixTree`` is a radix tree over the prompts' token ids (each node a run of tokens that a
set of prompts shares, split where they part). ``shared_prefill`` encodes the tree level by level:
the nodes of one depth in batched forwards (segments right-padded, nodes of similar length
together), each node attending to its ancestors' cached keys and values (gathered, left-padded,
masked) at its true positions. It then assembles the left-padded ``DynamicCache`` that HF
``generate`` would have built for all but each prompt's last token; ``generate`` encodes only
that last token and decodes as before, so the response layout (every response starts at the batch
width), the logits processors and the recorders are unchanged.

Exactness. Each token attends to the same keys at the same positions as in one left-padded batch;
only the matmul shapes (hence the order of float additions) differ. fp32 log-probs move by float
noise (≤ 1e-5 on every recorded batch, ``tests/test_prefix_prefill.py``) and the sampler consumes
the same random draws, so the same tokens come out unless a draw sits within noise of a boundary.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

#: A bucket of one depth's nodes may hold at most this many padded tokens per real one.
PAD_SLACK = 1.25


@dataclass(frozen=True)
class Node:
    tokens: tuple[int, ...]  # the run of tokens this node adds
    parent: int  # index of the parent node; -1 for a child of the (empty) root
    start: int  # position of its first token = length of the prefix before it
    depth: int  # 1 for a child of the root


class PrefixTree:
    """A radix tree over token sequences; ``ends[i]`` is the node where sequence i ends (-1: empty).

    Every node ends a sequence or has at least two children, so each token of the tree is a token
    of some prefix that the sequences share, and ``tokens`` counts them once.
    """

    def __init__(self, seqs: Sequence[Sequence[int]]):
        self.seqs = [tuple(int(t) for t in s) for s in seqs]
        self.nodes: list[Node] = []
        self.ends = [-1] * len(self.seqs)
        distinct: dict[tuple[int, ...], list[int]] = {}
        for i, s in enumerate(self.seqs):
            distinct.setdefault(s, []).append(i)
        self._keys = list(distinct)
        self._key_end: dict[int, int] = {}  # distinct sequence -> the node where it ends
        self._grow([k for k, s in enumerate(self._keys) if s], 0, -1, 0)
        for k, s in enumerate(self._keys):
            for i in distinct[s]:
                self.ends[i] = self._key_end.get(k, -1)

    def _grow(self, members: list[int], depth: int, parent: int, level: int) -> None:
        """Children of ``parent`` for the distinct sequences ``members``, which share their first ``depth`` tokens."""
        keys = self._keys
        by_first: dict[int, list[int]] = {}
        for k in members:
            by_first.setdefault(keys[k][depth], []).append(k)
        for group in by_first.values():
            end = depth + 1
            while all(len(keys[k]) > end for k in group) and len({keys[k][end] for k in group}) == 1:
                end += 1
            node = len(self.nodes)
            self.nodes.append(Node(keys[group[0]][depth:end], parent, depth, level + 1))
            rest = []
            for k in group:
                if len(keys[k]) == end:
                    self._key_end[k] = node
                else:
                    rest.append(k)
            if rest:
                self._grow(rest, end, node, level + 1)

    @property
    def tokens(self) -> int:
        """Tokens in the tree: what a prefix-shared prefill encodes."""
        return sum(len(n.tokens) for n in self.nodes)

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node``."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.nodes[node].parent
        return out[::-1]


def buckets(lengths: Sequence[int], max_rows: int) -> list[list[int]]:
    """Indices grouped for batched forwards: longest first, a new group when padding the next one
    in would exceed ``PAD_SLACK`` padded tokens per real token or ``max_rows`` rows."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    real = 0
    for i in order:
        if out and len(out[-1]) < max_rows and lengths[out[-1][0]] * (len(out[-1]) + 1) <= PAD_SLACK * (real + lengths[i]):
            out[-1].append(i)
            real += lengths[i]
        else:
            out.append([i])
            real = lengths[i]
    return out


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _gather(tree: PrefixTree, kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]], ends: Sequence[int],
            lengths: Sequence[int], width: int, layers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) [rows, kv heads, width, head dim]: row r holds the cached prefix
    ending at node ``ends[r]`` (``lengths[r]`` tokens), right-aligned, zeros to its left."""
    sample = next(iter(kv.values()))[0][0]
    heads, dim = sample.shape[0], sample.shape[-1]
    out = []
    for layer in range(layers):
        keys = sample.new_zeros((len(ends), heads, width, dim))
        values = torch.zeros_like(keys)
        for row, (node, length) in enumerate(zip(ends, lengths)):
            col = width - length
            for a in tree.path(node) if node >= 0 else []:
                k, v = kv[a][layer]
                keys[row, :, col : col + k.shape[1]] = k
                values[row, :, col : col + v.shape[1]] = v
                col += k.shape[1]
        out.append((keys, values))
    return out


def shared_prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device,
                   max_rows: int) -> tuple[DynamicCache, dict[str, int]]:
    """The left-padded cache of every prompt but its last token, each shared prefix encoded once.

    The cache has ``max(len(p)) - 1`` columns; row r's prefix is right-aligned, so
    ``generate(left-padded prompts, past_key_values=cache)`` encodes only the last column. Returns
    it with counts: ``tree_tokens`` (real tokens encoded here) and ``padded_tokens`` (with the
    buckets' padding). ``max_rows`` bounds the rows of one forward. Call under ``torch.no_grad``.
    """
    heads = [list(p[:-1]) for p in prompts]
    width = max(len(h) for h in heads)
    tree = PrefixTree(heads)
    kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    keep = {"logits_to_keep": 1} if _accepts_logits_to_keep(model) else {}
    padded = 0
    depth = 1
    while True:
        level = [i for i, n in enumerate(tree.nodes) if n.depth == depth]
        if not level:
            break
        for group in buckets([len(tree.nodes[i].tokens) for i in level], max_rows):
            nodes = [level[g] for g in group]
            seg = max(len(tree.nodes[i].tokens) for i in nodes)
            past = max(tree.nodes[i].start for i in nodes)
            ids = torch.full((len(nodes), seg), pad_id, dtype=torch.long)
            mask = torch.zeros((len(nodes), past + seg), dtype=torch.long)
            for row, i in enumerate(nodes):
                n = tree.nodes[i]
                ids[row, : len(n.tokens)] = torch.as_tensor(n.tokens, dtype=torch.long)
                mask[row, past - n.start : past + len(n.tokens)] = 1
            positions = torch.stack([tree.nodes[i].start + torch.arange(seg) for i in nodes])
            cache = DynamicCache()
            if past:
                cache = DynamicCache(_gather(tree, kv, [tree.nodes[i].parent for i in nodes],
                                             [tree.nodes[i].start for i in nodes], past, len(next(iter(kv.values())))))
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                        past_key_values=cache, use_cache=True, **keep)
            new = [(layer.keys[:, :, past:].contiguous(), layer.values[:, :, past:].contiguous())
                   for layer in out.past_key_values.layers]
            for row, i in enumerate(nodes):
                length = len(tree.nodes[i].tokens)
                kv[i] = [(k[row, :, :length], v[row, :, :length]) for k, v in new]
            padded += len(nodes) * seg
        depth += 1
    if not kv:
        return DynamicCache(), {"tree_tokens": 0, "padded_tokens": 0}
    layers = len(next(iter(kv.values())))
    cache = DynamicCache(_gather(tree, kv, tree.ends, [len(h) for h in heads], width, layers))
    return cache, {"tree_tokens": tree.tokens, "padded_tokens": padded}
