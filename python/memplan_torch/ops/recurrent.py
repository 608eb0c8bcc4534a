"""Recurrent layers: `lstm`, `gru`, `rnn_tanh` and `rnn_relu` (nn.LSTM, nn.GRU, nn.RNN),
unrolled into the step as PyTorch's CPU implementation computes them (aten's RNN.cpp):
per layer and direction, the input's projection for every time step at once (`matmul` and
the bias), then per step the hidden state's projection added to it, the gates (slices of
that sum: views) through their nonlinearities, and the new cell and hidden states. The
reverse direction runs the steps from the last; its outputs stand at their own steps, and
the two directions' outputs are concatenated on the feature axis (the next layer's input).

So the step holds what the recurrence is: the gates of every step, kept for the backward
as autograd keeps them, and the planner sees each step's values die. Dropout between
layers in training (`dropout=p`) is memplan's seeded `dropout` of each layer's output but
the last's (time-major, as aten applies it), a stream per layer. Unsupported forms are
refused (`extern`): LSTM projections (`proj_size`).
"""

from __future__ import annotations

from ..step import ExportError
from ..value import Value
from .registry import aten, handles

class _Writer:
    """Emits the unrolled ops of one recurrent node, each a helper value named by its layer,
    direction, step and role."""

    def __init__(self, t, dtype):
        self.t, self.dtype = t, dtype

    def emit(self, op, inputs, shape, role, attrs=()):
        return self.t.emit(op, inputs, attrs, fake=self.t.fake_like(shape, self.dtype), final=False, role=role)

    def linear(self, x: Value, w: Value, b: Value | None, role: str) -> Value:
        shape = x.shape[:-1] + [w.shape[0]]
        y = self.emit("matmul", [x, w], shape, role, [("transpose_b", True)])
        return y if b is None else self.emit("add", [y, b], shape, role + ".bias")

    def gate(self, gates: Value, k: int, width: int, role: str) -> Value:
        shape = gates.shape[:-1] + [width]
        attrs = [("axis", gates.rank - 1), ("start", k * width), ("end", (k + 1) * width)]
        return self.emit("slice", [gates], shape, role, attrs)

    def stacked(self, values: list[Value], role: str) -> Value:
        """[v0, v1, ...] of shape S as one [len, *S] value (`cat` of size-1 views)."""
        rows = [self.emit("reshape", [v], [1] + v.shape, f"{role}.row{i}", [("shape", [1] + v.shape)]) for i, v in enumerate(values)]
        if len(rows) == 1:
            return rows[0]
        return self.emit("cat", rows, [len(values)] + values[0].shape, role, [("axis", 0)])


def _cell(w: _Writer, kind: str, xw: Value, h: Value, c: Value | None, w_hh, b_hh, role: str):
    """One step: (new h, new c). `xw` is the input's projection at this step."""
    width = h.shape[-1]
    shape = h.shape
    hw = w.linear(h, w_hh, b_hh, f"{role}.hidden_proj")
    if kind == "lstm":
        gates = w.emit("add", [hw, xw], hw.shape, f"{role}.gates")
        i, f, g, o = (w.gate(gates, k, width, f"{role}.{name}") for k, name in enumerate("ifgo"))
        i = w.emit("sigmoid", [i], shape, f"{role}.input_gate")
        f = w.emit("sigmoid", [f], shape, f"{role}.forget_gate")
        g = w.emit("tanh", [g], shape, f"{role}.cell_gate")
        o = w.emit("sigmoid", [o], shape, f"{role}.output_gate")
        kept = w.emit("mul", [f, c], shape, f"{role}.kept")
        added = w.emit("mul", [i, g], shape, f"{role}.added")
        c = w.emit("add", [kept, added], shape, f"{role}.c")
        squashed = w.emit("tanh", [c], shape, f"{role}.c_tanh")
        return w.emit("mul", [o, squashed], shape, f"{role}.h"), c
    if kind == "gru":
        xr, xz, xn = (w.gate(xw, k, width, f"{role}.x{name}") for k, name in enumerate("rzn"))
        hr, hz, hn = (w.gate(hw, k, width, f"{role}.h{name}") for k, name in enumerate("rzn"))
        r = w.emit("sigmoid", [w.emit("add", [hr, xr], shape, f"{role}.reset_sum")], shape, f"{role}.reset_gate")
        z = w.emit("sigmoid", [w.emit("add", [hz, xz], shape, f"{role}.update_sum")], shape, f"{role}.update_gate")
        reset = w.emit("mul", [hn, r], shape, f"{role}.reset_hidden")
        n = w.emit("tanh", [w.emit("add", [xn, reset], shape, f"{role}.new_sum")], shape, f"{role}.new_gate")
        # PyTorch's (h − n)·z + n.
        moved = w.emit("mul", [w.emit("sub", [h, n], shape, f"{role}.h_minus_n"), z], shape, f"{role}.moved")
        return w.emit("add", [moved, n], shape, f"{role}.h"), None
    total = w.emit("add", [hw, xw], shape, f"{role}.sum")
    if kind == "rnn_tanh":
        return w.emit("tanh", [total], shape, f"{role}.h"), None
    return w.emit("relu", [total], shape, f"{role}.h"), None


def _recurrence(t, kind, x, hx: list[Value], params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != num_layers * directions * per:
        raise ExportError(f"{kind} with projections (proj_size) is not supported")
    if x.rank != 3:
        raise ExportError(f"{kind} of a rank-{x.rank} input")
    # Which final states the model reads (outputs 1, 2 of the node), and whether torch.export
    # traced them with their real shape [layers·directions, batch, hidden]: torch 2.11 traces
    # nn.LSTM's as [layers·directions, 1, batch, hidden], so the code after it was traced on
    # a shape eager PyTorch never gives.
    read = {user.args[1] for user in t.node.users if user.op == "call_function" and len(user.args) > 1 and user.users}
    batch, hidden = x.shape[0 if batch_first else 1], params[1].shape[1]
    for k in sorted(read - {0}):
        if list(t.out_fake(k).shape) != [num_layers * directions, batch, hidden]:
            raise ExportError(f"this torch traces {kind}'s final states with shape {list(t.out_fake(k).shape)}, not "
                              f"{[num_layers * directions, batch, hidden]} as it runs them (a torch.export bug of "
                              "torch 2.11, fixed in newer ones): use the layer's output, or a newer torch")
    w = _Writer(t, x.fake.dtype)
    seq = w.emit("transpose", [x], [x.shape[1], x.shape[0], x.shape[2]], "time_major", [("perm", [1, 0, 2])]) if batch_first else x
    steps = seq.shape[0]
    finals = [[] for _ in hx]
    layer_input = seq
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            at = (layer * directions + d) * per
            w_ih, w_hh = params[at], params[at + 1]
            b_ih, b_hh = (params[at + 2], params[at + 3]) if has_biases else (None, None)
            name = f"l{layer}" + ("_reverse" if d else "")
            index = layer * directions + d
            state = [w.emit("select", [v], v.shape[1:], f"{name}.{'hc'[k]}0", [("axis", 0), ("index", index)])
                     for k, v in enumerate(hx)]
            h, c = state[0], state[1] if kind == "lstm" else None
            projected = w.linear(layer_input, w_ih, b_ih, f"{name}.input_proj")
            hs = [None] * steps
            for s in (reversed(range(steps)) if d else range(steps)):
                xw = w.emit("select", [projected], projected.shape[1:], f"{name}.t{s}.x", [("axis", 0), ("index", s)])
                h, c = _cell(w, kind, xw, h, c, w_hh, b_hh, f"{name}.t{s}")
                hs[s] = h
            outputs.append(w.stacked(hs, f"{name}.output"))
            finals[0].append(h)
            if kind == "lstm":
                finals[1].append(c)
        if directions == 1:
            layer_input = outputs[0]
        else:
            shape = outputs[0].shape[:-1] + [2 * outputs[0].shape[-1]]
            layer_input = w.emit("cat", outputs, shape, f"l{layer}.output", [("axis", 2)])
        if dropout and train and layer < num_layers - 1:
            attrs = [("p", float(dropout)), ("stream", t.next_stream())]
            layer_input = w.emit("dropout", [layer_input, t.dropout_seed()], layer_input.shape, f"l{layer}.dropout", attrs)
    out = layer_input
    if batch_first:
        out = w.emit("transpose", [out], [out.shape[1], out.shape[0], out.shape[2]], "output", [("perm", [1, 0, 2])])
    return (out, *(w.stacked(f, ("h_n", "c_n")[k]) if k + 1 in read else None for k, f in enumerate(finals)))


@handles(aten.lstm.input)
def lstm(t, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrence(t, "lstm", x, list(hx), params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@handles(aten.gru.input)
def gru(t, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrence(t, "gru", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@handles(aten.rnn_tanh.input)
def rnn_tanh(t, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrence(t, "rnn_tanh", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@handles(aten.rnn_relu.input)
def rnn_relu(t, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrence(t, "rnn_relu", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
