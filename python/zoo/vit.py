"""A Vision Transformer (Dosovitskiy et al. 2021), written here: a strided convolution cuts
the image into patches, a learned class token is prepended and learned positions added,
pre-norm encoder blocks with fused (non-causal) attention and exact GELU, and the class
token's final state classifies.

`make()` is ViT-B/16 (224x224 images, 16x16 patches, 12 layers, 768 wide, 12 heads, MLP
3072, 1000 classes) at batch 32; `make_small()` keeps every piece at a size the CPU
reference trains in seconds.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, width, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image=224, patch=16, width=768, layers=12, heads=12, hidden=3072, classes=1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, width, patch, stride=patch)
        patches = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads, hidden) for _ in range(layers)])
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.head = nn.Linear(width, classes)

    def forward(self, images, labels):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x)[:, 0])
        return F.cross_entropy(logits, labels)


def make(batch=32):
    torch.manual_seed(0)
    model = ViT()
    return model, (torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,)))


def make_small(batch=2):
    torch.manual_seed(0)
    model = ViT(image=16, patch=4, width=32, layers=2, heads=2, hidden=64, classes=10)
    return model, (torch.randn(batch, 3, 16, 16), torch.randint(0, 10, (batch,)))
