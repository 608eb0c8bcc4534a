"""A Llama-style decoder (Touvron et al. 2023), written here: pre-norm blocks with RMSNorm,
rotary position embeddings (RoPE, the rotate-half form), grouped-query attention through
`F.scaled_dot_product_attention(..., enable_gqa=True)`, a SwiGLU feed-forward
(w2(silu(w1 x) * w3 x)), no biases, an untied output head.

`make_125m()` is a ~125M-parameter configuration (12 layers, 768 wide, 12 query heads
over 4 key/value heads, context 1024); `make_7b()` is Llama-2-7B's shape with grouped
queries (32 layers, 4096 wide, 32 query heads over 8 key/value heads, SwiGLU width 11008,
vocabulary 32000, sequence 2048), for planning only: build it under
`memplan_torch.virtual()` (the exporter's command line does) so no weight memory exists;
`make_small()` keeps every piece at a size the CPU reference trains in seconds.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def rotary_tables(head_dim, context, base=10000.0):
    """cos and sin of each position's angles, [context, head_dim] (each half repeated)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, width, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.wq = nn.Linear(width, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, width, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, width, heads, kv_heads, hidden, eps):
        super().__init__()
        self.attention_norm = nn.RMSNorm(width, eps=eps)
        self.attention = Attention(width, heads, kv_heads)
        self.ffn_norm = nn.RMSNorm(width, eps=eps)
        self.feed_forward = FeedForward(width, hidden)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, layers, width, heads, kv_heads, hidden, vocab, context, eps=1e-5):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList([Block(width, heads, kv_heads, hidden, eps) for _ in range(layers)])
        self.norm = nn.RMSNorm(width, eps=eps)
        self.output = nn.Linear(width, vocab, bias=False)
        cos, sin = rotary_tables(width // heads, context)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _batch(batch, context, vocab):
    tokens = torch.randint(0, vocab, (batch, context))
    return tokens, torch.roll(tokens, -1, dims=1)


def make_7b(batch=1):
    torch.manual_seed(0)
    model = Llama(layers=32, width=4096, heads=32, kv_heads=8, hidden=11008, vocab=32000, context=2048)
    return model, _batch(batch, 2048, 32000)


def make_125m(batch=8):
    torch.manual_seed(0)
    model = Llama(layers=12, width=768, heads=12, kv_heads=4, hidden=2048, vocab=32000, context=1024)
    return model, _batch(batch, 1024, 32000)


def make_small(batch=2):
    torch.manual_seed(0)
    model = Llama(layers=2, width=32, heads=4, kv_heads=2, hidden=64, vocab=64, context=16)
    return model, _batch(batch, 16, 64)
