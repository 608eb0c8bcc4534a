"""BERT (Devlin et al. 2019) pre-training on masked tokens, written here in the layout
Hugging Face uses: word, position and token-type embeddings, post-norm encoder layers
with fused attention, exact GELU and dropout (0.1) after the embeddings, the attention
output and the feed-forward, and a masked-language-model head tied to the word
embeddings. The loss is cross-entropy over the masked positions (label -100 elsewhere).

`make()` is BERT-base (12 layers, 768 wide, 12 heads, 3072 intermediate, vocabulary
30522) at batch 32 of 512 tokens; `make_small()` keeps every piece at a size the CPU
reference trains in seconds. `dropout=0.0` gives the same model without dropout (the
faithfulness tests compare with PyTorch that way: the two draw different random masks).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.dense = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(width, eps=1e-12)

    def forward(self, x):
        b, t, c = x.shape

        def heads(h):
            return h.view(b, t, self.heads, c // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)), heads(self.value(x)))
        y = self.dense(y.transpose(1, 2).reshape(b, t, c))
        return self.norm(x + self.dropout(y))


class Layer(nn.Module):
    def __init__(self, width, heads, intermediate, dropout):
        super().__init__()
        self.attention = SelfAttention(width, heads, dropout)
        self.intermediate = nn.Linear(width, intermediate)
        self.output = nn.Linear(intermediate, width)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(width, eps=1e-12)

    def forward(self, x):
        x = self.attention(x)
        return self.norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class Bert(nn.Module):
    def __init__(self, vocab=30522, width=768, layers=12, heads=12, intermediate=3072, positions=512, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, width)
        self.position_embeddings = nn.Embedding(positions, width)
        self.token_type_embeddings = nn.Embedding(2, width)
        self.embeddings_norm = nn.LayerNorm(width, eps=1e-12)
        self.embeddings_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList([Layer(width, heads, intermediate, dropout) for _ in range(layers)])
        self.mlm_dense = nn.Linear(width, width)
        self.mlm_norm = nn.LayerNorm(width, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        self.register_buffer("position_ids", torch.arange(positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, positions, dtype=torch.long), persistent=False)

    def forward(self, tokens, labels):
        t = tokens.shape[1]
        x = (
            self.word_embeddings(tokens)
            + self.position_embeddings(self.position_ids[:, :t])
            + self.token_type_embeddings(self.token_type_ids[:, :t])
        )
        x = self.embeddings_dropout(self.embeddings_norm(x))
        for layer in self.layers:
            x = layer(x)
        h = self.mlm_norm(F.gelu(self.mlm_dense(x)))
        logits = h @ self.word_embeddings.weight.t() + self.mlm_bias
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


def _batch(batch, length, vocab):
    """Tokens, and labels that ask for 15% of them back (-100 elsewhere)."""
    tokens = torch.randint(0, vocab, (batch, length))
    labels = torch.where(torch.rand(batch, length) < 0.15, tokens, torch.full_like(tokens, -100))
    labels[:, 0] = tokens[:, 0]  # at least one masked position per row
    return tokens, labels


def make(batch=32, dropout=0.1):
    torch.manual_seed(0)
    model = Bert(dropout=dropout)
    return model, _batch(batch, 512, 30522)


def make_small(batch=2, dropout=0.1):
    torch.manual_seed(0)
    model = Bert(vocab=64, width=32, layers=2, heads=2, intermediate=64, positions=16, dropout=dropout)
    return model, _batch(batch, 16, 64)


def make_small_without_dropout(batch=2):
    return make_small(batch, dropout=0.0)
