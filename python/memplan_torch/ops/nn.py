"""Neural-network layer handlers: softmax, embedding, the norms, max pooling and the losses.

Each is one memplan op that its backward op differentiates as a whole (docs/AUTODIFF.md),
so a layer PyTorch keeps whole in the training IR stays whole in the step; a layer memplan
has no op for (`avg_pool2d`, `group_norm`, `embedding_bag`, ...) is written as the several
ops it is, each handler's docstring saying which and what they keep. A missing
affine weight or bias of a norm is a constant `fill`. An f32 loss of f16/bf16 logits (CUDA
autocast's `cross_entropy`, or the model's own cast that nothing else reads) is one
`cross_entropy(..., f32_loss=true)`: no f32 copy of the logits.
"""

from __future__ import annotations

import torch

from ..step import ExportError
from ..value import Value
from ._helpers import cast_to, constant, reshaped
from .registry import aten, handles


@handles(aten.softmax.int)
def softmax(t, x, dim, dtype=None):
    x = cast_to(t, x, dtype)
    return t.emit("softmax", [x], [("axis", dim % x.rank)] if dim % x.rank != x.rank - 1 else [])


@handles(aten._softmax.default)
def softmax_internal(t, x, dim, half_to_float=False):
    return softmax(t, x, dim, torch.float32 if half_to_float else None)


@handles(aten.embedding.default)
def embedding(t, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq or sparse:
        raise ExportError("embedding with scale_grad_by_freq or sparse gradients is not supported")
    return t.emit("embedding", [weight, ids])


@handles(aten.layer_norm.default)
def layer_norm(t, x, shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """memplan's `layer_norm` over the last dimension; over the last k > 1, of x viewed with
    them as one (the weight and bias viewed alike): the same statistics."""
    d = 1
    for size in shape:
        d *= int(size)
    weight = reshaped(t, weight, [d], "gamma") if weight is not None else constant(t, [d], x.fake.dtype, 1.0, "gamma")
    bias = reshaped(t, bias, [d], "beta") if bias is not None else constant(t, [d], x.fake.dtype, 0.0, "beta")
    if len(shape) == 1:
        return t.emit("layer_norm", [x, weight, bias], [("eps", float(eps))])
    rows = reshaped(t, x, x.shape[:x.rank - len(shape)] + [d], "rows")
    normed = t.emit("layer_norm", [rows, weight, bias], [("eps", float(eps))], fake=rows.fake, final=False, role="normed")
    return reshaped(t, normed, x.shape, "layer_norm", final=True)


@handles(aten.rms_norm.default)
def rms_norm(t, x, shape, weight=None, eps=None):
    if len(shape) != 1:
        raise ExportError(f"rms_norm over {len(shape)} dimensions is not supported (only the last)")
    eps = torch.finfo(x.fake.dtype).eps if eps is None else eps
    weight = weight if weight is not None else constant(t, [int(shape[0])], x.fake.dtype, 1.0, "gamma")
    return t.emit("rms_norm", [x, weight], [("eps", float(eps))])


@handles(aten.batch_norm.default)
def batch_norm(t, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """BatchNorm without running statistics to update (`track_running_stats=False`): with
    them, the capture functionalizes it first (`_native_batch_norm_legit_functional`)."""
    if not training:
        return _batch_norm_eval(t, x, weight, bias, running_mean, running_var, eps)
    if running_mean is not None:
        raise ExportError("batch_norm with running statistics must be functionalized first (a memplan bug)")
    return _batch_norm(t, x, weight, bias, eps)


def _batch_norm(t, x, weight, bias, eps, fake=None) -> Value:
    c = x.shape[1]
    weight = weight if weight is not None else constant(t, [c], x.fake.dtype, 1.0, "gamma")
    bias = bias if bias is not None else constant(t, [c], x.fake.dtype, 0.0, "beta")
    return t.emit("batch_norm", [x, weight, bias], [("eps", float(eps))], fake=fake)


@handles(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(t, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Training BatchNorm and its running statistics: `batch_norm` for the output, and each
    running average mixed as PyTorch mixes it, `(1 − momentum)·running + momentum·batch`,
    with the batch's statistics from `batch_norm_stats` (the variance unbiased, as
    PyTorch's running_var); the capture writes them back with `update` (translate.py).
    The batch mean and inverse std PyTorch saves for its backward are not values of the
    step (memplan's `batch_norm_backward` recomputes them)."""
    if not training:
        out = _batch_norm_eval(t, x, weight, bias, running_mean, running_var, eps, fake=t.out_fake(0))
        return (out, None, None, running_mean, running_var)
    if any(user.args[1] in (1, 2) for user in t.node.users):
        raise ExportError("the batch statistics of _native_batch_norm_legit_functional are read: memplan's "
                          "batch_norm does not give them")
    out = _batch_norm(t, x, weight, bias, eps, fake=t.out_fake(0))
    f32 = t.fake_like([x.shape[1]], torch.float32)
    mean, var = t.emit_multi("batch_norm_stats", [x], [f32, f32], ["batch_mean", "batch_var"], [("correction", 1)])
    momentum = float(momentum)

    def mixed(running: Value, batch: Value, role: str) -> Value:
        kept = t.emit("mul_scalar", [running], [("value", 1.0 - momentum)], fake=running.fake, final=False, role=f"{role}.kept")
        batch = cast_to(t, batch, running.fake.dtype)
        added = t.emit("mul_scalar", [batch], [("value", momentum)], fake=running.fake, final=False, role=f"{role}.batch")
        return t.emit("add", [kept, added], fake=running.fake, final=False, role=f"{role}.new")

    return (out, None, None, mixed(running_mean, mean, "running_mean"), mixed(running_var, var, "running_var"))


@handles(aten._native_batch_norm_legit.no_stats)
def batch_norm_no_stats(t, x, weight, bias, training, momentum, eps):
    """BatchNorm without running statistics (`track_running_stats=False`), functionalized."""
    if any(user.args[1] in (1, 2) for user in t.node.users):
        raise ExportError("the batch statistics of _native_batch_norm_legit are read: memplan's batch_norm does not give them")
    return (_batch_norm(t, x, weight, bias, eps, fake=t.out_fake(0)), None, None)


@handles(aten._native_batch_norm_legit_no_training.default)
def batch_norm_no_training(t, x, weight, bias, running_mean, running_var, momentum, eps):
    """A BatchNorm in eval mode inside a training step (a frozen norm)."""
    if any(user.args[1] in (1, 2) for user in t.node.users):
        raise ExportError("the statistics of _native_batch_norm_legit_no_training are read")
    return (_batch_norm_eval(t, x, weight, bias, running_mean, running_var, eps, fake=t.out_fake(0)), None, None)


def _batch_norm_eval(t, x, weight, bias, running_mean, running_var, eps, fake=None) -> Value:
    """BatchNorm in eval mode: `x·scale + shift` per channel with the running statistics,
    `scale = weight / √(running_var + eps)` and `shift = bias − running_mean·scale` (what
    PyTorch computes; gradients reach weight, bias and x through these ops)."""
    c, dtype = x.shape[1], x.fake.dtype
    vector = t.fake_like([c], dtype)
    stats = [cast_to(t, v, dtype) for v in (running_mean, running_var)]
    shifted = t.emit("add_scalar", [stats[1]], [("value", float(eps))], fake=vector, final=False, role="var_eps")
    scale = t.emit("rsqrt", [shifted], fake=vector, final=False, role="rstd")
    if weight is not None:
        scale = t.emit("mul", [cast_to(t, weight, dtype), scale], fake=vector, final=False, role="scale")
    shift = t.emit("mul", [stats[0], scale], fake=vector, final=False, role="mean_scaled")
    shift = t.emit("neg", [shift], fake=vector, final=False, role="shift")
    if bias is not None:
        shift = t.emit("add", [cast_to(t, bias, dtype), shift], fake=vector, final=False, role="shift")
    column = [c] + [1] * (x.rank - 2)
    scale, shift = (t.emit("reshape", [v], [("shape", column)], fake=t.fake_like(column, dtype), final=False, role=f"{r}.column")
                    for v, r in ((scale, "scale"), (shift, "shift")))
    scaled = t.emit("mul", [x, scale], fake=x.fake, final=False, role="scaled")
    return t.emit("add", [scaled, shift], fake=fake)


@handles(aten.max_pool2d.default)
def max_pool2d(t, x, kernel, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    """memplan's `max_pool2d`. With `ceil_mode`, the last window PyTorch adds past the input
    (it starts inside it) is made whole by −inf padding on the bottom and right first
    (`pad`): a −inf never wins a window, so values and gradients are PyTorch's."""
    if list(dilation) not in ([1, 1], [1]):
        raise ExportError("max_pool2d with dilation is not supported")
    kernel = [int(k) for k in kernel] * (2 // len(kernel))
    stride = [int(s) for s in stride] * (2 // len(stride)) if stride else kernel
    padding = [int(p) for p in padding] * (2 // len(padding))
    out = t.out_fake().shape[-2:]
    extra = [max((int(out[d]) - 1) * stride[d] + kernel[d] - (x.shape[-2 + d] + 2 * padding[d]), 0) for d in (0, 1)]
    if ceil_mode and any(extra):
        from .shape import pad

        x = pad(t, x, [0, extra[1], 0, extra[0]], value=float("-inf"))
    return t.emit("max_pool2d", [x], [("kernel", kernel), ("stride", stride), ("padding", padding)])


@handles(aten.binary_cross_entropy_with_logits.default)
def bce_with_logits(t, logits, targets, weight=None, pos_weight=None, reduction=1):
    if weight is not None or pos_weight is not None or reduction != 1:
        raise ExportError("binary_cross_entropy_with_logits with weights or reduction other than 'mean' is not supported")
    # (CUDA autocast's f32 policy for this op is in the captured graph: its casts come first.)
    return t.emit("bce_with_logits", [logits, targets], fake=t.fake_like([], logits.fake.dtype), role="bce_with_logits")


_HALF = (torch.float16, torch.bfloat16)


def _fold_f32_cast(t, logits: Value) -> Value | None:
    """The f16/bf16 value that `logits` (the node's first argument) is a cast to f32 of,
    with that cast removed from the step, when nothing else reads the cast (the loss reads
    it alone, nothing returns it): memplan's `cross_entropy(x, f32_loss=true)` reads the
    half values as f32 itself, so the f32 copy, twice the logits' bytes, never exists."""
    node = t.node.args[0]
    if node.target not in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype) or len(node.users) != 1:
        return None
    source = t.env[node.args[0]]
    if logits.fake.dtype != torch.float32 or not isinstance(source, Value) or source.fake.dtype not in _HALF:
        return None
    cast = next((op for op in t.w.ops if op.outputs[0][0] == logits.name), None)
    if cast is None or cast.op != "cast" or cast.inputs != [source.name] or any(logits.name in op.inputs for op in t.w.ops):
        return None
    t.w.remove(cast)
    return source


@handles(aten.cross_entropy_loss.default)
def cross_entropy(t, logits, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    if weight is not None or reduction != 1:
        raise ExportError("cross_entropy with class weights or reduction other than 'mean' is not supported")
    if logits.rank == 1 or logits.rank != target.rank + 1:
        raise ExportError(f"cross_entropy of {logits.type} logits: [N, C] or [N, C, d1, ...] with class indices")
    if logits.rank > 2:
        # [N, C, d1, ...] with targets [N, d1, ...]: the classes moved last and every
        # position a row, [N·d1·..., C] (a copy), the targets flattened alike; the mean over
        # all positions is PyTorch's.
        perm = [0] + list(range(2, logits.rank)) + [1]
        moved = t.emit("transpose", [logits], [("perm", perm)], fake=t.fake_like([logits.shape[p] for p in perm],
                       logits.fake.dtype), final=False, role="classes_last")
        logits = reshaped(t, moved, [logits.fake.numel() // logits.shape[1], logits.shape[1]], "rows")
        target = reshaped(t, target, [target.fake.numel()], "targets")
    # An f32 loss of f16/bf16 logits, as one op: the logits are read as f32 inside it (exactly,
    # every half value being an f32 value). Either the model casts them itself and nothing
    # else reads the cast, or CUDA autocast does, inside cross_entropy (whose log_softmax and
    # nll_loss it runs in f32): that cast is in no captured graph, so it is never written.
    source = _fold_f32_cast(t, logits) if t.node.args[0].meta["val"].dim() == 2 else None
    f32_loss = source is not None or (t.amp and logits.fake.dtype in _HALF)
    logits = source or logits
    attrs = []
    if ignore_index != -100:
        attrs.append(("ignore_index", int(ignore_index)))
    if label_smoothing:
        attrs.append(("label_smoothing", float(label_smoothing)))
    if f32_loss:
        attrs.append(("f32_loss", True))
    loss = t.fake_like([], torch.float32) if f32_loss else None
    return t.emit("cross_entropy", [logits, target], attrs, fake=loss, role="cross_entropy")


@handles(aten.cumsum.default)
def cumsum(t, x, dim, dtype=None):
    """Running sums along `dim` in the output's dtype (PyTorch sums bool and integer
    tensors as i64 unless `dtype` says otherwise: a cast first)."""
    x = cast_to(t, x, t.out_fake().dtype)
    return t.emit("cumsum", [x], [("axis", dim % max(x.rank, 1))])


@handles(aten.avg_pool2d.default)
def avg_pool2d(t, x, kernel, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Average pooling as the depthwise convolution it is: a `conv2d` with `groups` = C of a
    constant [C, 1, kh, kw] weight of 1 / (kh·kw) (no gradient: the backward keeps nothing,
    as avg_pool2d's). Where the divisor is not the window's size, the window sums (the same
    convolution with weight 1) divided as PyTorch divides them: by `divisor_override`, or,
    with padding left out of the count (`count_include_pad=False`, PoolFormer's), by the
    number of real pixels under each window (the same sums over an image of ones). A
    ceil-mode window hanging past the input becomes `extern`."""
    pair = lambda v: [int(v[0]), int(v[-1])] if len(v) else None  # noqa: E731 - [k] means [k, k]
    kh, kw = pair(kernel)
    stride = pair(stride) or [kh, kw]
    padding = pair(padding) or [0, 0]
    if x.rank != 4:
        raise ExportError(f"avg_pool2d of a rank-{x.rank} tensor (memplan's takes [N,C,H,W])")
    out = t.out_fake()
    floor = [(x.shape[2 + d] + 2 * padding[d] - (kh, kw)[d]) // stride[d] + 1 for d in (0, 1)]
    if list(out.shape[2:]) != floor:
        raise ExportError("avg_pool2d whose ceil_mode adds a window past the input is not supported")
    channels, dtype = x.shape[1], x.fake.dtype
    attrs = [("stride", stride), ("padding", padding), ("groups", channels)]
    if divisor_override is None and (count_include_pad or padding == [0, 0]):
        weight = constant(t, [channels, 1, kh, kw], dtype, 1.0 / (kh * kw), "weight")
        return t.emit("conv2d", [x, weight], attrs)
    ones = constant(t, [channels, 1, kh, kw], dtype, 1.0, "window")
    sums = t.emit("conv2d", [x, ones], attrs, fake=out, final=False, role="sums")
    if divisor_override is not None:
        return t.emit("div", [sums, constant(t, [], dtype, float(divisor_override), "divisor")])
    image = constant(t, [1, 1] + x.shape[2:], dtype, 1.0, "pixels")
    unit = constant(t, [1, 1, kh, kw], dtype, 1.0, "unit_window")
    counts = t.emit("conv2d", [image, unit], [("stride", stride), ("padding", padding)],
                    fake=t.fake_like([1, 1] + list(out.shape[2:]), dtype), final=False, role="counts")
    return t.emit("div", [sums, counts])


@handles(aten.group_norm.default)
def group_norm(t, x, groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    """GroupNorm as the layer norm it is of each group: x [N,C,*] viewed as [N,G,(C/G)·*],
    `layer_norm` over its last dimension (without affine: constant gamma 1 and beta 0), viewed
    back, then the per-channel weight and bias (`mul`, `add` of [C,1,...] views). The norm
    saves what PyTorch's does (its input, mean and rstd per group); the affine's two
    products are buffers PyTorch's fused kernel does not make."""
    n, c = x.shape[0], x.shape[1]
    if c % groups:
        raise ExportError(f"group_norm of {c} channels in {groups} groups")
    width = x.fake.numel() // (n * groups) if n else 0
    rows = reshaped(t, x, [n, groups, width], "groups")
    dtype = x.fake.dtype
    one, zero = constant(t, [width], dtype, 1.0, "gamma"), constant(t, [width], dtype, 0.0, "beta")
    normed = t.emit("layer_norm", [rows, one, zero], [("eps", float(eps))], fake=rows.fake, final=False, role="normed")
    y = reshaped(t, normed, x.shape, "normed_image", final=weight is None and bias is None)
    column = [c] + [1] * (x.rank - 2)
    if weight is not None:
        w = reshaped(t, weight, column, "weight")
        y = t.emit("mul", [y, w], fake=None if bias is None else x.fake, final=bias is None, role="scaled")
    if bias is not None:
        y = t.emit("add", [y, reshaped(t, bias, column, "bias")])
    return y


@handles(aten.mse_loss.default)
def mse_loss(t, a, b, reduction=1):
    """`F.mse_loss`: `(a − b)²` (`sub`, `mul`), then its mean (the default), sum, or itself."""
    return _elementwise_loss(t, a, b, reduction, lambda d: t.emit("mul", [d, d], fake=d.fake, final=False, role="squared"))


@handles(aten._weight_norm.default)
def weight_norm(t, v, g, dim=0):
    """`torch._weight_norm(v, g, dim)` (weight_norm's weight): `v · (g / ‖v‖)`, the norm
    √Σv² over every dimension but `dim` (over all when `dim` is −1), as PyTorch computes it."""
    axes = list(range(v.rank)) if dim == -1 else [a for a in range(v.rank) if a != dim % v.rank]
    kept = [1 if a in axes else v.shape[a] for a in range(v.rank)]
    squares = t.emit("mul", [v, v], fake=v.fake, final=False, role="squares")
    total = t.emit("sum", [squares], [("axes", axes), ("keepdim", True)], fake=t.fake_like(kept, v.fake.dtype),
                   final=False, role="norm_squared")
    norm = t.emit("sqrt", [total], fake=total.fake, final=False, role="norm")
    g = reshaped(t, g, kept, "g") if g.shape != kept and g.fake.numel() == total.fake.numel() else g
    ratio = t.emit("div", [g, norm], fake=t.fake_like(torch.broadcast_shapes(g.fake.shape, norm.fake.shape), v.fake.dtype),
                   final=False, role="scale")
    return t.emit("mul", [v, ratio])


@handles(aten.instance_norm.default)
def instance_norm(t, x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled=True):
    """InstanceNorm with the batch's own statistics and none kept (`track_running_stats=False`,
    the default): the group norm of one channel a group."""
    if not use_input_stats or running_mean is not None or running_var is not None:
        raise ExportError("instance_norm with running statistics is not supported (track_running_stats=False only)")
    return group_norm(t, x, x.shape[1], weight, bias, eps)


def _elementwise_loss(t, a, b, reduction, per_element) -> Value:
    if reduction not in (0, 1, 2):
        raise ExportError(f"a loss with reduction {reduction}")
    shape = [int(d) for d in torch.broadcast_shapes(a.fake.shape, b.fake.shape)]
    diff = t.emit("sub", [a, b], fake=t.fake_like(shape, a.fake.dtype), final=False, role="diff")
    losses = per_element(diff)
    if reduction == 0:
        return losses
    axes = [("axes", list(range(losses.rank)))]
    return t.emit("mean", [losses], axes, role="loss") if reduction == 1 else t.emit("sum", [losses], axes, role="loss")


def _abs(t, d: Value) -> Value:
    from .elementwise import _sign

    return t.emit("mul", [d, _sign(t, d)], fake=d.fake, final=False, role="abs")


@handles(aten.l1_loss.default)
def l1_loss(t, a, b, reduction=1):
    """`F.l1_loss`: |a − b| (x·sign(x): the gradient PyTorch's sign(a − b), 0 at 0), reduced."""
    return _elementwise_loss(t, a, b, reduction, lambda d: _abs(t, d))


def _piecewise(t, d: Value, width: float, quadratic: float, linear_scale: float) -> Value:
    """where(|d| < width, quadratic·d², linear_scale·(|d| − width/2)): smooth L1 and Huber."""
    magnitude = _abs(t, d)
    inside = t.emit("compare_scalar", [magnitude], [("value", width), ("op", "lt")], fake=t.fake_like(d.shape, torch.bool),
                    final=False, role="inside")
    square = t.emit("mul", [d, d], fake=d.fake, final=False, role="square")
    square = t.emit("mul_scalar", [square], [("value", quadratic)], fake=d.fake, final=False, role="quadratic")
    line = t.emit("add_scalar", [magnitude], [("value", -0.5 * width)], fake=d.fake, final=False, role="shifted")
    if linear_scale != 1:
        line = t.emit("mul_scalar", [line], [("value", linear_scale)], fake=d.fake, final=False, role="linear")
    return t.emit("where", [inside, square, line], fake=d.fake, final=False, role="losses")


@handles(aten.smooth_l1_loss.default)
def smooth_l1_loss(t, a, b, reduction=1, beta=1.0):
    """`F.smooth_l1_loss`: 0.5·d²/β inside |d| < β, |d| − β/2 outside (|d| for β = 0)."""
    if beta == 0:
        return l1_loss(t, a, b, reduction)
    return _elementwise_loss(t, a, b, reduction, lambda d: _piecewise(t, d, float(beta), 0.5 / float(beta), 1.0))


@handles(aten.huber_loss.default)
def huber_loss(t, a, b, reduction=1, delta=1.0):
    """`F.huber_loss`: 0.5·d² inside |d| < δ, δ·(|d| − δ/2) outside."""
    return _elementwise_loss(t, a, b, reduction, lambda d: _piecewise(t, d, float(delta), 0.5, float(delta)))


@handles(aten.max_pool1d.default)
def max_pool1d(t, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    """`max_pool1d` of [N,C,L] (or [C,L]) as `max_pool2d` of the height-1 image (views)."""
    if x.rank not in (2, 3):
        raise ExportError(f"max_pool1d of a rank-{x.rank} tensor")
    one = lambda v, default: int(v[0]) if len(v) else default  # noqa: E731
    k = one(kernel, 1)
    s, p, d = one(stride, k), one(padding, 0), one(dilation, 1)
    if d != 1:
        raise ExportError("max_pool1d with dilation is not supported")
    image = reshaped(t, x, [1] * (3 - x.rank) + x.shape[:-1] + [1, x.shape[-1]], "image")
    out = t.out_fake()
    pooled_shape = image.shape[:3] + [int(out.shape[-1])]
    width, extra = x.shape[-1] + 2 * p, 0
    if ceil_mode:
        extra = max((int(out.shape[-1]) - 1) * s + k - width, 0)
    if extra:
        from .shape import pad

        image = pad(t, image, [0, extra], value=float("-inf"))
    pooled = t.emit("max_pool2d", [image], [("kernel", [1, k]), ("stride", [1, s]), ("padding", [0, p])],
                    fake=t.fake_like(pooled_shape, x.fake.dtype), final=False, role="pooled")
    return reshaped(t, pooled, out.shape, "max_pool1d", final=True)


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


@handles(aten.embedding_bag.padding_idx, aten.embedding_bag.default, aten._embedding_bag.default)
def embedding_bag(t, weight, ids, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """`F.embedding_bag` / `nn.EmbeddingBag` (sum, mean, max of each bag's rows). Sum and
    mean without per-sample weights or padding_idx are memplan's `embedding_bag` (offsets
    as given; with include_last_offset only when the last offset is a constant n), which
    holds no row per index. The other forms are decomposed: the rows
    gathered by `embedding` ([n, D] for n indices, which the fused op never makes: the
    cost of this decomposition), scaled by `per_sample_weights` (sum mode), rows of
    `padding_idx` zeroed (`where`; they take no gradient and are not counted), then
    reduced per bag. Bags of one length L (a 2-D input, whose offsets F.embedding_bag makes
    with `arange`, a constant here) are the rows viewed as [B, L, D]: `sum`, `mean` (or the
    sum divided by the rows that count, at least 1, with padding), max a `topk` of one (the
    first maximum wins, as PyTorch's, and takes the gradient). Bags given by other offsets:
    each index's bag (offsets marked by `scatter_add`, `cumsum` − 1), a `scatter_add` of the
    rows into [B, D], the mean divided by each bag's count (an empty bag is 0, as PyTorch's).
    Refused (extern): max mode with such offsets or with padding_idx, scale_grad_by_freq,
    sparse gradients, and a graph that reads the op's other outputs (offset2bag,
    bag_size, max_indices)."""
    import operator

    if scale_grad_by_freq or sparse:
        raise ExportError("embedding_bag with scale_grad_by_freq or sparse gradients is not supported")
    if any(user.target is not operator.getitem or (user.args[1] != 0 and user.users) for user in t.node.users):
        raise ExportError("embedding_bag's offset2bag, bag_size or max_indices are read: the decomposition does not give them")
    if ids.rank != 1 or offsets.rank != 1:
        raise ExportError("embedding_bag with indices that are not 1-D")
    how = _BAG_MODES.get(int(mode))
    padding = padding_idx is not None and padding_idx >= 0
    n, bags, width = ids.fake.numel(), offsets.fake.numel() - (1 if include_last_offset else 0), weight.shape[1]
    given = t.constant_values(offsets)
    length = n // bags if bags and n % bags == 0 else None
    regular = given is not None and length is not None and length > 0 and \
        torch.equal(given.to(torch.int64)[:bags], torch.arange(bags, dtype=torch.int64) * length) and \
        (not include_last_offset or int(given[-1]) == n)
    if how is None:
        raise ExportError(f"embedding_bag with mode={mode!r}")
    if how == "max" and (padding or not regular):
        raise ExportError("embedding_bag in max mode is supported for bags of one length (a 2-D input) without "
                          "padding_idx only (memplan has no per-segment max)")
    if per_sample_weights is not None and how != "sum":
        raise ExportError("embedding_bag: per_sample_weights are for mode='sum' only")
    last_is_n = not include_last_offset or (given is not None and int(given[-1]) == n)
    if how in ("sum", "mean") and per_sample_weights is None and not padding and last_is_n:
        if include_last_offset:
            offsets = t.emit("slice", [offsets], [("axis", 0), ("start", 0), ("end", bags)],
                             fake=t.fake_like([bags], offsets.fake.dtype), final=False, role="bag_starts")
        attrs = [("mode", how)] if how == "mean" else []
        return (t.emit("embedding_bag", [weight, ids, offsets], attrs, fake=t.out_fake(0)), None, None, None)
    dtype = weight.fake.dtype
    rows_fake = t.fake_like([n, width], dtype)
    rows = t.emit("embedding", [weight, ids], fake=rows_fake, final=False, role="rows")
    if per_sample_weights is not None:
        scale = reshaped(t, cast_to(t, per_sample_weights, dtype), [n, 1], "sample_weights")
        rows = t.emit("mul", [rows, scale], fake=rows_fake, final=False, role="weighted_rows")
    counted = None
    if padding:
        keep = t.emit("compare_scalar", [ids], [("value", float(padding_idx)), ("op", "ne")],
                      fake=t.fake_like([n], torch.bool), final=False, role="counted")
        rows = t.emit("where", [reshaped(t, keep, [n, 1], "counted_rows"), rows, constant(t, [], dtype, 0.0, "zero")],
                      fake=rows_fake, final=False, role="kept_rows")
        counted = t.emit("cast", [keep], [("to", dtype)], fake=t.fake_like([n], dtype), final=False, role="counts")
    out = t.out_fake(0)
    if regular:
        grouped = reshaped(t, rows, [bags, length, width], "bags")
        if how == "max":
            top, _ = t.emit_multi("topk", [grouped], [t.fake_like([bags, 1, width], dtype),
                                  t.fake_like([bags, 1, width], torch.int64)], ["max", "max_index"], [("k", 1), ("axis", 1)])
            return (reshaped(t, top, out.shape, "embedding_bag"), None, None, None)
        if how == "mean" and counted is None:
            return (t.emit("mean", [grouped], [("axes", [1])], fake=out), None, None, None)
        sums = t.emit("sum", [grouped], [("axes", [1])], fake=out, final=how == "sum", role="sums")
        if how == "sum":
            return (sums, None, None, None)
        counts = t.emit("sum", [reshaped(t, counted, [bags, length], "bag_counts")], [("axes", [1])],
                        fake=t.fake_like([bags], dtype), final=False, role="count")
    else:
        starts = offsets if not include_last_offset else t.emit(
            "slice", [offsets], [("axis", 0), ("start", 0), ("end", bags)], fake=t.fake_like([bags], offsets.fake.dtype),
            final=False, role="starts")
        starts = cast_to(t, starts, torch.int64)
        f32 = torch.float32
        marks = t.emit("scatter_add", [constant(t, [n + 1], f32, 0.0, "no_starts"), starts,
                                       constant(t, [bags], f32, 1.0, "one")],
                       [("axis", 0)], fake=t.fake_like([n + 1], f32), final=False, role="starts_at")
        marks = t.emit("slice", [marks], [("axis", 0), ("start", 0), ("end", n)], fake=t.fake_like([n], f32), final=False,
                       role="starts_before")
        running = t.emit("cumsum", [marks], [("axis", 0)], fake=marks.fake, final=False, role="bags_begun")
        bag = t.emit("cast", [running], [("to", torch.int64)], fake=t.fake_like([n], torch.int64), final=False,
                     role="bags_begun_count")
        bag = t.emit("add_scalar", [bag], [("value", -1.0)], fake=bag.fake, final=False, role="bag")
        spread = t.emit("expand", [reshaped(t, bag, [n, 1], "bag_column")], [("shape", [n, width])],
                        fake=t.fake_like([n, width], torch.int64), final=False, role="bag_index")
        zeros = constant(t, [bags, width], dtype, 0.0, "no_rows")
        sums = t.emit("scatter_add", [zeros, spread, rows], [("axis", 0)], fake=out, final=how == "sum", role="sums")
        if how == "sum":
            return (sums, None, None, None)
        each = counted if counted is not None else constant(t, [n], dtype, 1.0, "each")
        counts = t.emit("scatter_add", [constant(t, [bags], dtype, 0.0, "no_counts"), bag, each], [("axis", 0)],
                        fake=t.fake_like([bags], dtype), final=False, role="count")
    bools = t.fake_like([bags], torch.bool)
    empty = t.emit("compare_scalar", [counts], [("value", 0.0), ("op", "eq")], fake=bools, final=False, role="empty")
    counts = t.emit("where", [empty, constant(t, [], dtype, 1.0, "one"), counts], fake=counts.fake, final=False,
                    role="divisor")
    return (t.emit("div", [sums, reshaped(t, counts, [bags, 1], "divisor_column")], fake=out), None, None, None)
