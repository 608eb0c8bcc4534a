"""A U-Net (Ronneberger et al. 2015) for binary segmentation, written here: an encoder of
double 3x3 convolutions (with batch norm and ReLU) and 2x2 max pooling, a decoder that
upsamples with stride-2 transposed convolutions and concatenates the encoder's feature map
of the same size (the skip connections), a 1x1 convolution to one logit per pixel, and
binary cross-entropy on the logits.

`make()` is the original's widths (64 to 1024 channels, four levels) on 256x256 images at
batch 8; `make_small()` keeps every piece at a size the CPU reference trains in seconds.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class DoubleConv(nn.Sequential):
    def __init__(self, inputs, outputs):
        super().__init__(
            nn.Conv2d(inputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(),
            nn.Conv2d(outputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(),
        )


class UNet(nn.Module):
    def __init__(self, channels=3, widths=(64, 128, 256, 512, 1024)):
        super().__init__()
        self.down = nn.ModuleList()
        inputs = channels
        for width in widths:
            self.down.append(DoubleConv(inputs, width))
            inputs = width
        self.up = nn.ModuleList()
        self.up_conv = nn.ModuleList()
        for width in reversed(widths[:-1]):
            self.up.append(nn.ConvTranspose2d(inputs, width, 2, stride=2))
            self.up_conv.append(DoubleConv(2 * width, width))
            inputs = width
        self.head = nn.Conv2d(inputs, 1, 1)

    def forward(self, images, masks):
        skips = []
        x = images
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up, block in zip(self.up, self.up_conv):
            x = block(torch.cat([skips.pop(), up(x)], dim=1))
        return F.binary_cross_entropy_with_logits(self.head(x), masks)


def _batch(batch, size):
    images = torch.randn(batch, 3, size, size)
    masks = (torch.rand(batch, 1, size, size) < 0.3).float()
    return images, masks


def make(batch=8):
    torch.manual_seed(0)
    return UNet(), _batch(batch, 256)


def make_small(batch=2):
    torch.manual_seed(0)
    return UNet(widths=(4, 8, 16)), _batch(batch, 16)
