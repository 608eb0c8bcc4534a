"""A two-layer MLP classifier (784 -> 256 -> 10), as in memplan's ir/models/mlp.step."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, inputs=784, hidden=256, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x, y):
        h = F.relu(self.fc1(x))
        logits = self.fc2(h)
        return F.cross_entropy(logits, y)


def make(batch=64):
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(batch, 784)
    y = torch.randint(0, 10, (batch,))
    return model, (x, y)
