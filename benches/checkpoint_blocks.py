"""Three residual MLP blocks, each under torch.utils.checkpoint (non-reentrant) or not:
what the user's checkpointing saves, planned (benches/BENCHMARKS.md, issue 29).

    python -m memplan_torch export benches/checkpoint_blocks.py:checkpointed -o ck.step
    python -m memplan_torch export benches/checkpoint_blocks.py:plain -o plain.step
"""

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a, self.b = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.b(F.gelu(self.a(x)))


class Blocks(torch.nn.Module):
    def __init__(self, use_checkpoint, d=64, n=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head, self.use_checkpoint = torch.nn.Linear(d, 10), use_checkpoint

    def forward(self, x, y):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return F.cross_entropy(self.head(x), y)


def _make(use_checkpoint):
    torch.manual_seed(0)
    return Blocks(use_checkpoint), (torch.randn(256, 64), torch.randint(0, 10, (256,)))


def checkpointed():
    return _make(True)


def plain():
    return _make(False)
