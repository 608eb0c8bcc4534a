"""GPT-2 (Radford et al. 2019) written as nanoGPT writes it: pre-norm blocks, fused
attention through `F.scaled_dot_product_attention` (causal), exact GELU, learned positions
from `torch.arange`, the token embedding tied to the output head, and the language-model
loss over every position.

`make()` is GPT-2 small (124M parameters: 12 layers, 12 heads, 768 wide, context 1024,
vocabulary 50304 as nanoGPT pads it) at batch 8; `make_small()` keeps every piece at a
size the CPU reference trains in seconds; `make_small_bf16()` is the same small model for
export under `--amp bf16`.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.resid_dropout = nn.Dropout(dropout)
        self.heads, self.width, self.dropout = heads, width, dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, width, dropout):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, layers=12, heads=12, width=768, context=1024, vocab=50304, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab, width),
                wpe=nn.Embedding(context, width),
                drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block(width, heads, dropout) for _ in range(layers)]),
                ln_f=nn.LayerNorm(width),
            )
        )
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        b, t = idx.shape
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def _batch(batch, context, vocab):
    idx = torch.randint(0, vocab, (batch, context))
    return idx, torch.roll(idx, -1, dims=1)


def make(batch=8):
    torch.manual_seed(0)
    model = GPT()
    return model, _batch(batch, 1024, 50304)


def make_small(batch=2):
    torch.manual_seed(0)
    model = GPT(layers=2, heads=2, width=32, context=16, vocab=64)
    return model, _batch(batch, 16, 64)


def make_small_bf16(batch=2):
    return make_small(batch)
