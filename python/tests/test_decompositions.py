"""ATen ops real models use (issue 30), written as memplan's ops (some as several), held
to PyTorch: each small model below uses several of them and trains three SGD steps in
memplan as in PyTorch from the same weights and batch (test_semantics.compare_three_steps:
losses to 1e-5, every parameter within 5% of SGD's move of it), with no `extern` op.
Ops whose values are integers or copies (rounding, norms' maxima, unfold/fold, writes at
indices, histc) are also held to PyTorch bit for bit on edge values; forms with no exact
decomposition stay `extern`, with a warning that says why.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import memplan_torch
from memplan_torch import safetensors, step_arguments
from memplan_torch.step import ExportWarning
from test_semantics import compare_three_steps
from test_zoo import memplan_steps


class Audio(nn.Module):
    """Whisper's, Wav2Vec2's and Mamba's layers: conv1d (a weight-normed one, a depthwise
    dilated one with 'same' padding), group_norm, softplus, erf, max_pool1d,
    adaptive_avg_pool1d, mse_loss."""

    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(3, 8, 3, padding=1), dim=2)
        self.norm = nn.GroupNorm(2, 8)
        self.depthwise = nn.Conv1d(8, 8, 3, padding="same", dilation=2, groups=8)
        self.strided = nn.Conv1d(8, 6, 4, stride=2, bias=False)
        self.head = nn.Linear(6 * 3, 5)

    def forward(self, x, target):
        h = F.softplus(self.norm(self.conv(x)), beta=2.0, threshold=1.0)
        h = self.depthwise(h) + h
        h = h * 0.5 * (1 + torch.erf(h * 0.7071067811865476))  # ESM's GELU, written out
        h = self.strided(F.max_pool1d(h, 2, stride=1, ceil_mode=True) + h[..., :-1])
        h = F.adaptive_avg_pool1d(h, 3).flatten(1)
        return F.mse_loss(self.head(h), target)


class Indexing(nn.Module):
    """Swin's, CLIP's, Falcon's and BLOOM's indexing: a table indexed by a constant index
    (repeated rows sum their gradients), rows picked at dimension 1 (a gather), CLIP's
    pooling at each row's argmax, roll, repeat, broadcast_tensors and a power of a
    constant base."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(7, 4))
        self.proj = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)
        self.register_buffer("relative", torch.tensor([[0, 3, 3], [6, 1, 0]]), persistent=False)

    def forward(self, ids, positions, y):
        bias = self.table[self.relative]  # [2, 3, 4]
        h = self.proj(bias).repeat(2, 1, 1)  # [4, 3, 4]
        h = torch.roll(h, shifts=(1, -1), dims=(1, 2)) + h[:, positions]  # gather at dim 1
        slopes = torch.pow(torch.tensor(0.5), torch.arange(1, 5))
        h, s = torch.broadcast_tensors(h, slopes)
        h = h * s
        pooled = h[torch.arange(h.shape[0]), ids.argmax(dim=-1)]  # [4, 4]
        return F.cross_entropy(self.head(pooled), y)


class Segmentation(nn.Module):
    """DeepLabV3's and SqueezeNet's layers: max_pool2d with ceil_mode, bilinear upsampling
    (align_corners off and on, up and down), cross-entropy over [N, C, H, W] logits."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.classes = nn.Conv2d(6, 4, 1)

    def forward(self, x, y):
        h = F.max_pool2d(torch.relu(self.stem(x)), 3, stride=2, ceil_mode=True)  # 10 -> 5 (floor: 4)
        h = F.interpolate(h, size=(7, 5), mode="bilinear", align_corners=True)
        h = F.interpolate(h, size=(9, 9), mode="bilinear", align_corners=False)
        return F.cross_entropy(self.classes(h), y)


class Router(nn.Module):
    """A mixture-of-experts layer as transformers' `batched_mm` experts run it, and sort: topk of the
    router's probabilities, each token repeated per chosen expert (repeat_interleave), the
    experts' weights gathered by index and applied with bmm, the results weighted and
    summed."""

    def __init__(self, width=6, experts=4, top=2):
        super().__init__()
        self.router = nn.Linear(width, experts, bias=False)
        self.up = nn.Parameter(torch.randn(experts, 8, width) * 0.3)
        self.top, self.head = top, nn.Linear(width + 8, 3)
        self.inp = nn.Linear(5, width)

    def forward(self, x, y):
        h = self.inp(x)
        weights, chosen = torch.topk(torch.softmax(self.router(h), dim=-1), self.top, dim=-1)
        ranked, _ = torch.sort(self.router(h), dim=0, descending=True)  # sort: every element's topk
        h = h + ranked[:, :1] * 0.1 - torch.sort(h, stable=True)[0] * 0.1
        weights = weights / weights.sum(dim=-1, keepdim=True)
        picked = self.up[chosen.reshape(-1)]  # [T·top, 8, width]
        out = torch.bmm(picked, h.repeat_interleave(self.top, dim=0).unsqueeze(-1)).squeeze(-1)
        out = (torch.relu(out) * weights.reshape(-1, 1)).view(h.shape[0], self.top, -1).sum(dim=1)
        return F.cross_entropy(self.head(torch.cat([out, h], dim=-1)), y)


class Recurrent(nn.Module):
    """nn.LSTM (two layers, both directions, batch first), nn.GRU and nn.RNN, unrolled."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(10, 6)
        self.rnn = nn.RNN(6, 3, nonlinearity="relu", bias=False)
        self.head = nn.Linear(3 + 6, 2)

    def forward(self, x, y):
        out, (h, c) = self.lstm(x)  # [B, T, 10], h and c [4, B, 5]
        out, g = self.gru(out.transpose(0, 1))  # time-major
        out, _ = self.rnn(out)
        features = torch.cat([out[-1], g[0]], dim=-1)
        return F.cross_entropy(self.head(features), y) + (c[-1] * h[-2]).mean()


def _lstm_states_traced_as_they_run() -> bool:
    """Whether this torch's export gives nn.LSTM's final states their real shape (2.11 adds
    a dimension of 1)."""
    shapes = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(2, 3)

        def forward(self, x):
            out, (h, _) = self.lstm(x)
            shapes.append(tuple(h.shape))
            return out.sum()

    torch.export.export(Probe(), (torch.randn(4, 2, 2),))
    return shapes[-1] == (1, 2, 3)


def _recurrent():
    torch.manual_seed(15)
    return Recurrent(), (torch.randn(3, 4, 4), torch.tensor([0, 1, 1]))


class Pointwise(nn.Module):
    """Activations, clamps, norms and losses written as several ops: leaky_relu, elu, selu,
    clamp by numbers and by a tensor, hardtanh, relu6, abs, maximum (with ties: half the
    gradient to each side) and minimum, avg_pool2d leaving padding out
    of the count and with a divisor_override, layer_norm over two dims,
    instance_norm, pixel_shuffle and pixel_unshuffle, and the L1, smooth L1 and Huber
    losses."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 8, 3, padding=1)
        self.norm = nn.LayerNorm([2, 4])
        self.instance = nn.InstanceNorm2d(2, affine=True)
        self.ceiling = nn.Parameter(torch.full((2, 1, 1), 0.5))
        self.u, self.v = nn.Parameter(torch.full((3,), 1.2)), nn.Parameter(torch.full((3,), 1.2))
        self.head = nn.Linear(8 * 2 * 4, 3)

    def forward(self, x, target):
        h = F.pixel_shuffle(self.conv(x), 2)  # [N, 2, 8, 8]
        h = F.leaky_relu(h, 0.2) + F.elu(h, alpha=0.7) + F.selu(h) * 0.1
        h = self.instance(torch.clamp(h, -1.5, 2.0) + F.hardtanh(h, -0.5, 0.5) + F.relu6(h * 4))
        h = torch.clamp(h, max=self.ceiling).abs() + torch.maximum(h, torch.relu(h)) - torch.minimum(h, self.ceiling * h)
        h = F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False) + F.avg_pool2d(h, 2, 2, divisor_override=3) \
            .repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)
        h = F.pixel_unshuffle(h, 2)  # [N, 8, 4, 4]
        h = self.norm(h.reshape(h.shape[0], 8, 2, 2, 4).mean(dim=2).reshape(h.shape[0], -1, 2, 4)).flatten(1)
        out = self.head(h)
        out = torch.maximum(self.u * out, self.v * out)  # u = v: a tie everywhere, half the gradient each
        return F.l1_loss(out, target) + F.smooth_l1_loss(out, target, beta=0.5) + F.huber_loss(out, target, delta=0.3)


def _pointwise():
    torch.manual_seed(16)
    return Pointwise(), (torch.randn(2, 2, 4, 4), torch.randn(2, 3))


class Composite(nn.Module):
    """Ops PyTorch itself defines through others (einsum, meshgrid: the exporter translates
    their decomposition as PyTorch traces it), and XLNet's and Funnel's position encodings:
    a number to a tensor power, reciprocal, index_select."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5, 3) * 0.3)
        self.head = nn.Linear(3 + 4, 2)

    def forward(self, x, picks, y):
        h = torch.einsum("btd,dkc->bktc", x, self.w).sum(dim=2)  # [B, 5, 3]
        rows, cols = torch.meshgrid(torch.arange(5), torch.arange(4), indexing="ij")
        angles = (rows - cols).float() * torch.reciprocal(torch.pow(100.0, torch.arange(4) / 4.0) + 1.0)  # [5, 4]
        table = torch.sin(angles).index_select(0, picks)  # [3, 4]
        mixed = torch.einsum("bkc,kd->bcd", h, torch.cat([table, table[:2]], dim=0)).mean(dim=1)  # [B, 4]
        return F.cross_entropy(self.head(torch.cat([h.mean(dim=1), mixed], dim=-1)), y)


def _composite():
    torch.manual_seed(17)
    return Composite(), (torch.randn(2, 3, 4), torch.tensor([4, 0, 2]), torch.tensor([1, 0]))


class Scatter(nn.Module):
    """Sums at indexed positions (graph networks' message passing, pooling by segment):
    scatter_add, index_add (with alpha) and `x[i, j] += v` (index_put accumulating), with
    repeated indices."""

    def __init__(self):
        super().__init__()
        self.messages = nn.Linear(4, 4)
        self.head = nn.Linear(4 * 3, 2)

    def forward(self, features, edges, y):
        sent = self.messages(features)  # [5, 4]: one message per node
        nodes = torch.zeros(3, 4).scatter_add(0, edges.unsqueeze(1).expand(-1, 4), sent)
        nodes = nodes.index_add(0, edges[:3], sent[:3] * 2, alpha=0.5)
        grid = torch.zeros(3, 3, 4)
        grid = grid.index_put((edges[:4], edges[1:]), sent[:4], accumulate=True) + grid
        pooled = grid.sum(dim=1) + nodes
        return F.cross_entropy(self.head(pooled.reshape(1, -1)).expand(2, -1), y)


def _scatter():
    torch.manual_seed(18)
    return Scatter(), (torch.randn(5, 4), torch.tensor([0, 2, 2, 1, 0]), torch.tensor([1, 0]))


class Bags(nn.Module):
    """DLRM's, fastText's, XCiT's and Canine's ops: EmbeddingBag (sum with per-sample weights
    and offsets, mean with padding_idx, max), Canine's hash (integer % and //), norms (the
    inf norm with ties between u and v: half the gradient each; 1, 3 and F.normalize's 2),
    unfold and fold, a float floor division by 0.25 (its values in the loss), trunc
    division by a tensor, remainder and fmod by powers of two (gradient 1), histc, and
    `x[i] = v` with a repeated row (the last write wins; every write's value gets the
    gradient of its row, as in PyTorch)."""

    def __init__(self):
        super().__init__()
        self.sum_bag = nn.EmbeddingBag(12, 4, mode="sum")
        self.mean_bag = nn.EmbeddingBag(6, 4, mode="mean", padding_idx=0)
        self.max_bag = nn.EmbeddingBag(12, 4, mode="max")
        self.u, self.v = nn.Parameter(torch.full((4,), 0.7)), nn.Parameter(torch.full((4,), 0.7))
        self.slots = nn.Parameter(torch.randn(3, 4))
        self.conv = nn.Conv2d(2, 3, 1)
        self.head = nn.Linear(4 + 3 * 9 + 3 + 4, 3)

    def forward(self, ids, offsets, weights, image, y):
        batch = y.shape[0]
        hashed = ((ids + 1) * 31) % 12
        h = self.sum_bag(hashed, offsets, per_sample_weights=weights)  # 1-D ids, 3 bags (one empty)
        h = h + self.mean_bag((ids // 2).view(batch, -1)) + self.max_bag(torch.fmod(ids * 5, 7).view(batch, -1))
        pair = torch.stack([self.u * h, self.v * h], dim=1)  # u = v: every maximum is tied
        h = h + torch.linalg.vector_norm(pair, float("inf"), dim=(1, 2), keepdim=True).squeeze(-1) * 0.1
        h = F.normalize(h, dim=-1) * torch.linalg.vector_norm(h, 1, dim=-1, keepdim=True) \
            + torch.linalg.vector_norm(h, 3.0, dim=0)
        h = h + torch.div(h, 0.25, rounding_mode="floor") * 0.05 + torch.div(h, self.u + 2, rounding_mode="trunc") * 0.1
        h = torch.remainder(h * 3, 2.0) - torch.fmod(h, 0.5) + torch.histc(h.detach(), bins=4, min=-2, max=2).sum() * 0.01
        board = h.unsqueeze(1).repeat(1, 5, 1)  # [B, 5, 4]
        board[:, torch.tensor([3, 0, 3])] = self.slots  # row 3 twice: slots[2] wins
        cols = F.unfold(self.conv(image), 3, padding=1, stride=2)  # [B, 27, 9]
        folded = F.fold(cols, (5, 5), 3, padding=1, stride=2)  # [B, 3, 5, 5]
        features = torch.cat([board.mean(dim=1), cols.mean(dim=-1), folded.mean(dim=(2, 3)), h], dim=-1)
        return F.cross_entropy(self.head(features), y)


def _bags():
    torch.manual_seed(19)
    ids = torch.tensor([3, 7, 1, 0, 11, 4, 2, 9, 5, 6, 8, 10])
    return Bags(), (ids, torch.tensor([0, 5, 5]), torch.rand(12), torch.randn(3, 2, 5, 5), torch.tensor([2, 0, 1]))


def _router():
    torch.manual_seed(14)
    return Router(), (torch.randn(10, 5), torch.randint(0, 3, (10,)))


class Video(nn.Module):
    """A video model's layers: a tubelet patch embedding (VideoMAE's conv3d, stride = kernel),
    a padded, dilated, grouped conv3d with 'same' padding, and a head."""

    def __init__(self):
        super().__init__()
        self.patches = nn.Conv3d(3, 8, (2, 2, 2), stride=(2, 2, 2))
        self.mix = nn.Conv3d(8, 8, 3, padding="same", dilation=(1, 2, 1), groups=2, bias=False)
        self.strided = nn.Conv3d(8, 6, (1, 3, 3), stride=(1, 2, 1), padding=(0, 1, 0))
        self.head = nn.Linear(6, 4)

    def forward(self, x, y):
        h = F.gelu(self.patches(x))
        h = self.strided(self.mix(h) + h)
        return F.cross_entropy(self.head(h.mean(dim=(2, 3, 4))), y)


class Sampling(nn.Module):
    """A spatial transformer (affine_grid from a learned theta, near the identity, then
    bilinear grid_sample: PyTorch's decomposition of affine_grid_generator, linspace in it)
    and deformable sampling at learned offsets (border padding, align_corners; and nearest)."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Linear(3 * 6 * 6, 6)
        nn.init.zeros_(self.loc.weight)
        with torch.no_grad():
            self.loc.bias.copy_(torch.tensor([1.0, 0.1, 0.05, -0.1, 0.9, 0.0]))
        self.offsets = nn.Conv2d(3, 2, 3, padding=1)
        self.head = nn.Linear(3 * 5 * 5 * 2 + 3 * 6 * 6, 3)

    def forward(self, x, y):
        theta = self.loc(x.flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, [x.shape[0], 3, 5, 5], align_corners=False)
        warped = F.grid_sample(x, grid, align_corners=False)
        moved = torch.tanh(self.offsets(x)).permute(0, 2, 3, 1) * 1.2
        deformed = F.grid_sample(x, moved, padding_mode="border", align_corners=True)
        picked = F.grid_sample(x, grid, mode="nearest", align_corners=False)
        features = torch.cat([warped.flatten(1), picked.flatten(1), deformed.flatten(1)], dim=1)
        return F.cross_entropy(self.head(features), y)


def _sampling():
    torch.manual_seed(15)
    return Sampling(), (torch.randn(2, 3, 6, 6), torch.tensor([0, 2]))


class Recommender(nn.Module):
    """DLRM's sparse features: EmbeddingBag sum over bags given by offsets (one bag empty)
    and mean over bags of one length (a 2-D input): memplan's embedding_bag, no row per id."""

    def __init__(self):
        super().__init__()
        self.users = nn.EmbeddingBag(20, 6, mode="sum")
        self.items = nn.EmbeddingBag(15, 6, mode="mean")
        self.head = nn.Linear(12, 1)

    def forward(self, user_ids, offsets, item_ids, y):
        features = torch.cat([self.users(user_ids, offsets), self.items(item_ids)], dim=1)
        return F.mse_loss(self.head(features), y)


def _recommender():
    torch.manual_seed(16)
    return Recommender(), (torch.tensor([4, 19, 4, 0, 7, 12, 3]), torch.tensor([0, 3, 3, 5]),
                           torch.randint(0, 15, (4, 3)), torch.randn(4, 1))


def _video():
    torch.manual_seed(14)
    return Video(), (torch.randn(2, 3, 4, 8, 8), torch.tensor([1, 3]))


def _audio():
    torch.manual_seed(11)
    return Audio(), (torch.randn(4, 3, 12), torch.randn(4, 5))


def _indexing():
    torch.manual_seed(12)
    return Indexing(), (torch.tensor([[0, 5, 2], [7, 7, 1], [1, 2, 9], [3, 0, 0]]), torch.tensor([2, -1, 0]),
                        torch.tensor([0, 2, 1, 2]))


def _segmentation():
    torch.manual_seed(13)
    return Segmentation(), (torch.randn(2, 3, 10, 10), torch.randint(0, 4, (2, 9, 9)))


@pytest.mark.parametrize("build", [_audio, _indexing, _segmentation, _router, _recurrent, _pointwise, _composite, _scatter,
                                   _bags, _video, _sampling, _recommender],
                         ids=["audio", "indexing", "segmentation", "router", "recurrent", "pointwise", "composite", "scatter",
                              "bags", "video", "sampling", "recommender"])
def test_decomposed_ops_train_as_in_pytorch(memplan, tmp_path, build):
    model, inputs = build()
    if build is _recurrent and not _lstm_states_traced_as_they_run():
        # This torch's export traces the LSTM's h and c with another shape than they have:
        # the exporter says so (the layer stays extern) instead of translating a graph eager
        # PyTorch never runs.
        with pytest.warns(ExportWarning, match="final states with shape"):
            text = memplan_torch.export_step(model, inputs)
        assert 'target="aten::lstm.input"' in text
        return
    text, with_grad = compare_three_steps(memplan, tmp_path, model, inputs)
    assert "extern" not in text, text
    assert with_grad == {name for name, _ in model.named_parameters()}
    wanted = {"audio": ["conv2d(", "layer_norm(", "sqrt(", "log(", "erf(", "max_pool2d("], "indexing": ["embedding(", "gather(", "argmax(", "cat("],
              "segmentation": ["value=-inf", "upsample_bilinear2d(", "align_corners=true", "cross_entropy("],
              "router": ["topk(", "embedding(", "matmul("],
              "recurrent": ["l1_reverse.t0.forget_gate", "sigmoid(", "relu("],
              "pointwise": ['op="le"', 'op="ge"', "layer_norm(", "exp("],
              "composite": ["matmul(", "div(", "embedding("],
              "scatter": ["scatter_add("],
              "sampling": ["grid_sample(", 'mode="nearest"', 'padding_mode="border"', "align_corners=true"],
              "recommender": ["= embedding_bag(%users.weight", 'mode="mean"'],
              "video": ["conv3d(", "stride=[2, 2, 2]", "dilation=[1, 2, 1]", "groups=2"],
              "bags": ["embedding(", "cumsum(", "topk(", "slice_scatter(", 'to=i64', "pow_scalar("]}
    for piece in wanted[build.__name__[1:]]:
        assert piece in text, (piece, text)


def test_a_power_of_a_base_that_may_be_negative_is_not_rewritten():
    """exp(e·log x) is not x ** e for a negative x: such a power stays `extern`."""

    class Power(nn.Module):
        def forward(self, x, e):
            return (x ** e).sum()

    with pytest.warns(ExportWarning, match=r"test_decompositions.py:\d+: aten.pow.Tensor_Tensor is written as extern: "
                      "pow of a tensor base and a tensor exponent is supported for a positive constant base only"):
        text = memplan_torch.export_step(Power(), (torch.randn(3), torch.randn(3)))
    assert 'target="aten::pow.Tensor_Tensor"' in text and "exp(" not in text, text


class Exact(nn.Module):
    """Ops whose values must be PyTorch's to the bit (a floor is off by one, not by a
    rounding): each result is written into a buffer (times 1: a buffer's new value must be
    computed, not a view), which memplan saves after the step. Edge values: ±0, ±inf, NaN,
    subnormals, halves, floats past 2^23, a repeated row written with ±inf and NaN."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        for name in ("out_trunc", "out_floor", "out_ceil", "out_div_trunc", "out_div_floor", "out_floor_divide",
                     "out_remainder", "out_fmod", "out_remainder_negative", "out_fmod_negative"):
            self.register_buffer(name, torch.zeros(26))
        for name in ("out_int_trunc", "out_int_floor", "out_int_remainder", "out_int_fmod", "out_int_remainder_number",
                     "out_int_floor_number"):
            self.register_buffer(name, torch.zeros(10, dtype=torch.int64))
        for name, shape in (("out_norm2", [4]), ("out_norm1", [4, 1]), ("out_norm0", []), ("out_norm_inf", [4]),
                            ("out_norm_minus_inf", [4]), ("out_norm_p", [4]), ("out_norm_half", [5])):
            self.register_buffer(name, torch.zeros(shape))
        self.register_buffer("out_unfolded", torch.zeros(2, 3 * 6, 12))
        self.register_buffer("out_unfolded_unbatched", torch.zeros(12, 9))
        self.register_buffer("out_folded", torch.zeros(2, 3, 7, 6))
        self.register_buffer("out_put", torch.zeros(6, 3))
        self.register_buffer("out_put_middle", torch.zeros(2, 5, 3))
        self.register_buffer("out_put_bool", torch.zeros(4, 4, dtype=torch.bool))
        self.register_buffer("out_filled", torch.zeros(6, 3))
        self.register_buffer("out_histogram", torch.zeros(7))

    def forward(self, a, b, ia, ib, x, image, cols, values, rows):
        a = a * self.w
        self.out_trunc, self.out_floor, self.out_ceil = torch.trunc(a) * 1, torch.floor(a) * 1, torch.ceil(a) * 1
        self.out_div_trunc = torch.div(a, b, rounding_mode="trunc") * 1
        self.out_div_floor = torch.div(a, 2, rounding_mode="floor") * 1
        self.out_floor_divide = a // 0.5 * 1
        self.out_remainder, self.out_fmod = torch.remainder(a, 2.0) * 1, torch.fmod(a, 2) * 1
        self.out_remainder_negative, self.out_fmod_negative = torch.remainder(a, -0.25) * 1, torch.fmod(a, -4.0) * 1
        self.out_int_trunc = torch.div(ia, ib, rounding_mode="trunc")
        self.out_int_floor, self.out_int_remainder, self.out_int_fmod = ia // ib, ia % ib, torch.fmod(ia, ib)
        self.out_int_remainder_number, self.out_int_floor_number = ia % -3, torch.div(ia, 3, rounding_mode="floor")
        self.out_norm2 = torch.linalg.vector_norm(x, dim=-1) * 1
        self.out_norm1 = torch.linalg.vector_norm(x, 1, dim=1, keepdim=True) * 1
        self.out_norm0 = torch.linalg.vector_norm(x, 0) * 1
        self.out_norm_inf = torch.linalg.vector_norm(x, float("inf"), dim=1) * 1
        self.out_norm_minus_inf = torch.linalg.vector_norm(x, -float("inf"), dim=1) * 1
        self.out_norm_p = torch.linalg.vector_norm(x, 3.5, dim=-1) * 1
        self.out_norm_half = torch.linalg.vector_norm(x, 0.5, dim=0) * 1
        self.out_unfolded = F.unfold(image, (2, 3), dilation=(2, 1), padding=1, stride=(2, 2)) * 1
        self.out_unfolded_unbatched = F.unfold(image[0, :, :5, :5], 2, stride=2, padding=1) * 1
        self.out_folded = F.fold(cols, (7, 6), (2, 3), dilation=(2, 1), padding=1, stride=(2, 2)) * 1
        put = a[:18].reshape(6, 3).clone()
        put[rows] = values  # rows 4 twice
        self.out_put = put * 1
        middle = a[:15].reshape(1, 5, 3).repeat(2, 1, 1)
        middle[:, rows[:3]] = -values[:3]
        self.out_put_middle = middle * 1
        mask = torch.zeros(4, 4, dtype=torch.bool)
        mask[ia[:4].abs() % 4, ib[:4].abs() % 4] = True
        self.out_put_bool = mask | mask
        filled = a[:18].reshape(6, 3).clone()
        filled[rows] = 7.5
        self.out_filled = filled * 1
        self.out_histogram = torch.histc(torch.cat([a.detach(), x.flatten()]), bins=7, min=-0.3, max=2.1)
        return (torch.remainder(a, 2.0)[:5] * 2).sum()


def test_rounding_norms_windows_and_writes_are_pytorchs_to_the_bit(memplan, tmp_path):
    """Each value of `Exact` after a step in memplan is PyTorch's bit for bit (NaN where
    PyTorch's is NaN, each zero's sign), and no op is `extern`."""
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([-4., 4., -0.0, 0.0, inf, -inf, nan, -1e-45, 1e-45, -0.5, 0.5, 1.5, -1.5, 2.5, -2.5, 1e30, -1e30,
                      8388607.5, -8388607.5, 3.0, -7.75, 7.75, 0.1, -0.1, 1.0, 2.0])
    b = torch.tensor([3., -3., 2., -2., 0.1, 0.2, 0.3, 0.7, -0.7, 7., 9., 1e-20, -1e-20, 0., -0., 0.5, 4., 2., 3., 7.,
                      3., -3., 1., 1., 1., 1.])
    ia, ib = torch.tensor([7, -7, 7, -7, 0, 6, -6, 5, -5, 1]), torch.tensor([2, 2, -2, -2, 3, 3, 3, -5, 5, 7])
    x = torch.tensor([[0., 0., 0., 0., 0.], [1., -2., 3., -3., 0.5], [inf, 1., 2., 3., 4.], [nan, 1., -inf, 0., 2.]])
    torch.manual_seed(20)
    image, cols = torch.randn(2, 3, 7, 6), torch.randn(2, 18, 12) * 1e3
    image[0, 0, 1, 1], image[1, 2, 3, 3], image[0, 1, 2, 2], cols[1, 0, 0] = inf, nan, -0.0, -0.0
    values = torch.randn(5, 3)
    values[0, 0], values[1, 0], values[2, 1], values[3, 2] = -inf, inf, nan, -0.0
    rows = torch.tensor([4, -1, 0, 4, 2])
    model, inputs = Exact(), (a, b, ia, ib, x, image, cols, values, rows)
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    assert "extern" not in text, text
    step, weights = tmp_path / "exact.step", tmp_path / "w.safetensors"
    step.write_text(text)
    safetensors.write_new(weights, step_arguments(model, inputs))
    _, after = memplan_steps(memplan, tmp_path, step, weights, 1)
    model(*inputs)
    for name, want in model.named_buffers():
        got, want = after[name], want.detach()
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if want.is_floating_point():
            same = torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~got.isnan()], want[~want.isnan()]) and \
                torch.equal(got[~got.isnan()].signbit(), want[~want.isnan()].signbit())
        else:
            same = torch.equal(got, want)
        assert same, (name, got, want)


@pytest.mark.parametrize("forward,why", [
    (lambda a, b: torch.div(a, b, rounding_mode="floor"),
     "div with rounding_mode='floor' of floats is supported for a divisor that is a power-of-two number only"),
    (lambda a, b: torch.remainder(a, 0.3), "remainder of floats is supported for a divisor that is a power-of-two number only"),
    (lambda a, b: F.embedding_bag(torch.tensor([1, 2, 0]), a.reshape(3, 2), torch.tensor([0, 1]), mode="max"),
     "embedding_bag in max mode is supported for bags of one length"),
    (lambda a, b: torch.histc(a, bins=3), r"histc with min ≥ max \(a range taken from the data\) is not supported"),
    (lambda a, b: torch.linalg.vector_norm(a, -2.0), r"linalg_vector_norm with ord=-2.0 is not supported"),
], ids=["float-floor-by-tensor", "float-remainder-by-0.3", "bag-max-offsets", "histc-data-range", "norm-negative-p"])
def test_forms_without_an_exact_decomposition_stay_extern(forward, why):
    """What cannot be written exactly with memplan's ops is `extern`, with a warning that
    says why (memplan would need a floor/fmod op, a per-segment max, a min/max of the data)."""

    class Refused(nn.Module):
        def forward(self, a, b):
            return forward(a, b).sum()

    with pytest.warns(ExportWarning, match=why):
        text = memplan_torch.export_step(Refused(), (torch.randn(6), torch.randn(6)))
    assert "extern(" in text, text
