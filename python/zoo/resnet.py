"""ResNet-50 (He et al. 2016, bottleneck blocks) for image classification, written here.

`make()` is the full ResNet-50 (224x224, 1000 classes); `make_small()` keeps the shape of
the network (a stem, four stages of bottleneck blocks, global pooling, a classifier) at a
size the CPU reference runs in seconds.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    def __init__(self, inputs, width, stride):
        super().__init__()
        outputs = width * 4
        self.conv1 = nn.Conv2d(inputs, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, outputs, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(outputs)
        self.shortcut = None
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(h + skip)


class ResNet(nn.Module):
    def __init__(self, blocks=(3, 4, 6, 3), widths=(64, 128, 256, 512), stem=64, classes=1000):
        super().__init__()
        self.stem = nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(stem)
        layers, inputs = [], stem
        for i, (n, width) in enumerate(zip(blocks, widths)):
            for j in range(n):
                layers.append(Bottleneck(inputs, width, 2 if j == 0 and i > 0 else 1))
                inputs = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, images, labels):
        x = F.max_pool2d(F.relu(self.bn(self.stem(images))), 3, stride=2, padding=1)
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.cross_entropy(self.fc(x), labels)


def make(batch=32, image=224):
    torch.manual_seed(0)
    model = ResNet()
    return model, (torch.randn(batch, 3, image, image), torch.randint(0, 1000, (batch,)))


def make_small(batch=4):
    torch.manual_seed(0)
    model = ResNet(blocks=(1, 1, 1, 1), widths=(4, 8, 8, 16), stem=8, classes=10)
    return model, (torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,)))


def make_small_bf16(batch=4):
    """make_small, exported under `--amp bf16` (BatchNorm with bf16 inputs and f32 params)."""
    return make_small(batch)
