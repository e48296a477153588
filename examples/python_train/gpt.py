"""A GPT-style causal transformer from torch.nn modules that runs one step of a dcp plan on this
rank's token shard: the same architecture as the LibTorch example (pre-norm blocks, fused q/k/v,
GELU MLP, learned positions), with dcp.torch's sequence-parallel attention and checkpointing."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import dcp
import dcp.torch


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    hidden: int = 64
    heads: int = 4
    mlp: int = 256
    blocks: int = 2
    max_len: int = 1024  #: rows of the learned position embedding
    seed: int = 1
    backend: str = "math"  #: dcp.torch.attention's backend: math, sdpa, flex or varlen (dcp.torch.BACKENDS)

    def spec(self) -> dcp.Model:
        """The model dcp prices: the same blocks, width, heads and MLP, causal attention."""
        return dcp.Model("python-gpt", blocks=self.blocks, hidden=self.hidden, heads=self.heads,
                         mlp_width=self.mlp, mlp_matrices=2, attention="causal")


class Block(nn.Module):
    """x + proj(attention(ln1 x)), then x + fc2(gelu(fc1(ln2 x)))."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.heads, self.head_dim, self.backend = c.heads, c.hidden // c.heads, c.backend
        self.ln1 = nn.LayerNorm(c.hidden)
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden)
        self.proj = nn.Linear(c.hidden, c.hidden)
        self.ln2 = nn.LayerNorm(c.hidden)
        self.fc1 = nn.Linear(c.hidden, c.mlp)
        self.fc2 = nn.Linear(c.mlp, c.hidden)

    def forward(self, x: torch.Tensor, ctx: dcp.torch.StepContext) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(t, self.heads, 3 * self.head_dim).split(self.head_dim, -1)
        a = dcp.torch.attention(q, k, v, ctx, causal=True, backend=self.backend)
        # reshape to the width, not -1: a padding pass (no tokens) has t = 0
        h = x + self.proj(a.reshape(t, self.heads * self.head_dim))
        return h + self.fc2(nn.functional.gelu(self.fc1(self.ln2(h))))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab, c.hidden)
        self.pos = nn.Embedding(c.max_len, c.hidden)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.blocks))
        self.ln_f = nn.LayerNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.vocab)
        with torch.no_grad():
            self.tok.weight.normal_(0, 0.1)
            self.pos.weight.normal_(0, 0.1)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, ctx: dcp.torch.StepContext,
                checkpointed: int = 0) -> torch.Tensor:
        """Logits [t, vocab] of this rank's tokens; the first ``checkpointed`` blocks recompute."""
        longest = max(b - a for a, b in zip(ctx.seq_begin, ctx.seq_begin[1:])) if len(ctx.seq_begin) > 1 else 0
        if longest > self.config.max_len:
            raise dcp.Error(f"GPT: a sequence of {longest} tokens is longer than max_len = {self.config.max_len} "
                            "positions; build the model with a larger max_len")
        x = self.tok(tokens) + self.pos(positions)
        for i, block in enumerate(self.blocks):
            x = dcp.torch.checkpoint(block, x, ctx) if i < checkpointed else block(x, ctx)
        return self.head(self.ln_f(x))


def make_gpt(c: GPTConfig, dtype: torch.dtype = torch.float64) -> GPT:
    """The same parameters on every rank: initialised from ``c.seed``."""
    torch.manual_seed(c.seed)
    return GPT(c).to(dtype)


def scaled_device(spec: dcp.Model, world: int, fit_tokens: float) -> dcp.Device:
    """The LibTorch example's device for a small model on CPU ranks (every clock and memory field
    set here; the name and HBM size start from the h200 preset): a sequence of ``fit_tokens``
    tokens just fits one rank with nothing checkpointed, so longer ones need recompute or sp > 1."""
    d = dcp.device_preset("h200-analytic").replace(name="cpu-scaled", peak=5e9, eff_max=0.5, x_half=128, alpha=5e-5,
                                          tau=5e-5, bw_intra=2e9, bw_inter=1e9, gpus_per_node=8, usable=0.9,
                                          beta=34)
    p = spec.parameters()
    return d.replace(mem_bytes=(4 * p + 12 * p / world + (spec.blocks + 1) * d.beta * spec.hidden * fit_tokens) /
                     d.usable)
