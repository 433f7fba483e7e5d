"""Composite ops: core computes each from primitives, a backend may run it as one kernel.

``ember.functional`` calls a composite's op when the tensor's device implements it
(``device.implements(op)``: a kernel in the backend's table; a decorator decides for itself)
and runs the decomposition in core otherwise, so a backend never *has* to fill these.  The
backward composites (``*_backward``) are what Autodiff's rules for the forward ones call; they
fall back to decompositions the same way.

Parameters arrive normalised: ``dim`` is a non-negative axis; ``ndim`` (the number of trailing
normalised axes) is at least 1; weights and biases have the normalised shape and the input's
dtype; row statistics (``mean``, ``rstd``, ``lse``, ``count``) are float32 for half inputs and
the input's dtype otherwise, shaped like the input without its normalised (or class) axes.
Optional tensor inputs are left out of the argument list, and ``weight``/``bias`` flags say
which are there.
"""

from ._op import Op

_ROWS = ("dim",)

#: ``softmax(x, dim=)``
softmax = Op("softmax", "composite", 1, _ROWS, dtypes="float")
#: ``log_softmax(x, dim=)``
log_softmax = Op("log_softmax", "composite", 1, _ROWS, dtypes="float")
#: ``softmax_backward(y, g, dim=)`` -> ``y * (g - sum(g * y, dim))`` where ``y`` = softmax(x).
softmax_backward = Op("softmax_backward", "composite", 2, _ROWS, dtypes="float")
#: ``log_softmax_backward(y, g, dim=)`` -> ``g - exp(y) * sum(g, dim)``, ``y`` = log_softmax(x).
log_softmax_backward = Op("log_softmax_backward", "composite", 2, _ROWS, dtypes="float")

#: ``layer_norm(x, [weight], [bias], ndim=, eps=, weight=bool, bias=bool)`` ->
#: ``(y, mean, rstd)`` with the biased variance, as PyTorch.
layer_norm = Op("layer_norm", "composite", -1, ("ndim", "eps", "weight", "bias"),
                result="same+stats", outputs=3, dtypes="float")
#: ``layer_norm_backward(g, x, mean, rstd, [weight], ndim=, weight=bool, affine=bool)`` ->
#: ``(dx, dweight, dbias)``; ``dweight`` and ``dbias`` (normalised shape) are computed when
#: ``affine``, else they are empty ``(0,)`` tensors.
layer_norm_backward = Op("layer_norm_backward", "composite", -1, ("ndim", "weight", "affine"),
                         result="same*3", outputs=3, dtypes="float")

#: ``rms_norm(x, [weight], ndim=, eps=, weight=bool)`` -> ``(y, rstd)``.
rms_norm = Op("rms_norm", "composite", -1, ("ndim", "eps", "weight"), result="same+stat",
              outputs=2, dtypes="float")
#: ``rms_norm_backward(g, x, rstd, [weight], ndim=, weight=bool)`` -> ``(dx, dweight)``;
#: ``dweight`` is empty ``(0,)`` without a weight.
rms_norm_backward = Op("rms_norm_backward", "composite", -1, ("ndim", "weight"),
                       result="same*2", outputs=2, dtypes="float")

_CE = ("ignore_index", "label_smoothing", "reduction")
#: ``cross_entropy(logits[M, C], target[M] int64, ignore_index=, label_smoothing=,
#: reduction=("mean"|"sum"|"none"), float32_loss=)`` -> ``(loss, lse[M], count[])``: the loss
#: (0-d, or ``[M]`` for ``none``), each row's logsumexp and the number of targets not ignored.
#: The loss has the logits' dtype, or with ``float32_loss`` the statistics' (float32 for half
#: logits: autocast's float32 loss, computed from the half logits without widening them first).
cross_entropy = Op("cross_entropy", "composite", 2, (*_CE, "float32_loss"), result="loss+stats",
                   outputs=3, dtypes="float")
#: ``cross_entropy_backward(g, logits, target, lse, count, ...)`` -> ``dlogits`` in the
#: logits' dtype: ``(softmax - (1 - s) onehot - s / C)`` scaled by ``g`` (and ``1 / count``
#: for ``mean``), zero on ignored rows.  ``g`` has the loss's dtype (float32 for the
#: ``float32_loss`` of half logits).
cross_entropy_backward = Op("cross_entropy_backward", "composite", 5, _CE, result="second",
                            dtypes="float")

#: ``adam_step(p, g, exp_avg, exp_avg_sq, lr=, beta1=, beta2=, eps=, weight_decay=,
#: decoupled=, maximize=, step_size=, bias_correction2_sqrt=)`` -> ``(p, exp_avg, exp_avg_sq)``:
#: one Adam/AdamW update of one parameter, as `ember.optim.Adam` computes it without AMSGrad
#: (``step_size = lr / (1 - beta1**t)``, ``bias_correction2_sqrt = sqrt(1 - beta2**t)``).
#: float16 / bfloat16 / float32 parameters; all four tensors share shape and dtype.
adam_step = Op("adam_step", "composite", 4,
               ("lr", "beta1", "beta2", "eps", "weight_decay", "decoupled", "maximize",
                "step_size", "bias_correction2_sqrt"),
               result="same*3", outputs=3, differentiable=False, dtypes="float")
#: ``adam_steps(p_1..p_n, g_1..g_n, exp_avg_1..exp_avg_n, exp_avg_sq_1..exp_avg_sq_n, <the
#: params of adam_step>)`` -> ``(p_1..p_n, exp_avg_1..exp_avg_n, exp_avg_sq_1..exp_avg_sq_n)``:
#: `adam_step` for n parameters at one step count, as one op (PyTorch's multi-tensor Adam: a
#: backend updates them all in one launch).  A parameter's four tensors share shape and dtype;
#: different parameters may differ in both.
adam_steps = Op("adam_steps", "composite", -1, adam_step.params, result="params*3", outputs=-1,
                differentiable=False, dtypes="float")
#: ``adam_step_capturable(p, g, exp_avg, exp_avg_sq, step, lr=, beta1=, beta2=, eps=,
#: weight_decay=, decoupled=, maximize=)`` -> ``(p, exp_avg, exp_avg_sq)``: `adam_step` with the
#: step count ``step`` (float32, 0-d, already counting this step) read on the device, which
#: computes both bias corrections from it: nothing in the update is a host number that changes
#: between steps (what a recorded CUDA graph replays).
adam_step_capturable = Op("adam_step_capturable", "composite", 5,
                          ("lr", "beta1", "beta2", "eps", "weight_decay", "decoupled",
                           "maximize"),
                          result="same*3", outputs=3, differentiable=False, dtypes="float")
#: ``adam_steps_capturable(p_1..p_n, g_1..g_n, exp_avg_1..exp_avg_n, exp_avg_sq_1..exp_avg_sq_n,
#: step, <the params of adam_step_capturable>)`` -> ``(p_1..p_n, exp_avg_1..exp_avg_n,
#: exp_avg_sq_1..exp_avg_sq_n)``: `adam_step_capturable` for n parameters sharing one step
#: count, as one op (one launch per 16 parameters on the Triton backends).
adam_steps_capturable = Op("adam_steps_capturable", "composite", -1, adam_step_capturable.params,
                           result="params*3", outputs=-1, differentiable=False, dtypes="float")

#: ``linear(x[N, in], weight[out, in], bias[out])`` -> ``x @ weight.T + bias`` (``[N, out]``):
#: a matmul whose epilogue adds the bias (one kernel where a backend fuses it); all three
#: share one float dtype.  Its backward is matmuls and a column sum (Autodiff's rule).
linear = Op("linear", "composite", 3, dtypes="float")

#: ``clamp_backward(g, x, min=, max=)`` -> ``g`` where ``min <= x <= max`` (a bound that is
#: ``None`` is absent) and 0 elsewhere: the gradient of ``clamp`` (and so of ``relu``) as one
#: op.  ``g`` and ``x`` share shape and float dtype; ``min``/``max`` are Python numbers.
clamp_backward = Op("clamp_backward", "composite", 2, ("min", "max"), dtypes="float")

#: ``max_pool2d_backward(g[N,C,OH,OW], indices[N,C,OH,OW] int64, x[N,C,H,W], kernel_size=,
#: stride=, padding=, dilation=, ceil_mode=)`` -> ``dx`` (``x``'s shape and dtype): each window's
#: gradient added at the position ``indices`` names in its ``H*W`` plane (what `max_pool2d`
#: returned); positions no window picked get 0.  ``g`` has ``x``'s float dtype.
max_pool2d_backward = Op("max_pool2d_backward", "composite", 3,
                         ("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                         result="last", dtypes="float")

#: ``max_pool2d_values(x[N,C,H,W], kernel_size=, stride=, padding=, dilation=, ceil_mode=)`` ->
#: the values `ember.ops.nn.max_pool2d` returns, without the indices only its backward reads
#: (what ``max_pool2d`` runs when no indices are asked for and no gradient will flow).
max_pool2d_values = Op("max_pool2d_values", "composite", 1, max_pool2d_backward.params)

#: ``conv2d_weight_grad(g[N,O,OH,OW], x[N,C,H,W], w[O,C/groups,kh,kw], stride=, padding=,
#: dilation=, groups=)`` -> ``dw`` (``w``'s shape): the gradient of `ember.ops.nn.conv2d` with
#: respect to its weight (``w`` gives the shape only); all three share one float dtype.
conv2d_weight_grad = Op("conv2d_weight_grad", "composite", 3,
                        ("stride", "padding", "dilation", "groups"), result="last",
                        dtypes="float")

#: ``gelu(x, approximate=("none"|"tanh"))`` -> ``x * Phi(x)``: the exact form with ``erf``, or
#: PyTorch's ``tanh`` approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``.
gelu = Op("gelu", "composite", 1, ("approximate",), dtypes="float")
#: ``gelu_backward(g, x, y, approximate=)`` -> ``g * d gelu(x) / dx`` where ``y = gelu(x)`` (the
#: forward's output: a kernel may read ``Phi(x) = y / x`` from it rather than evaluate ``erf``
#: again); ``g``, ``x`` and ``y`` share shape and dtype.
gelu_backward = Op("gelu_backward", "composite", 3, ("approximate",), dtypes="float")

_SDPA = ("scale", "causal", "mask")
#: ``scaled_dot_product_attention(q[..., L, D], k[..., S, D], v[..., S, Dv], [mask], scale=,
#: causal=bool, mask=bool)`` -> ``(out[..., L, Dv], lse[..., L])``: ``softmax(q k^T scale +
#: bias) v`` and each score row's logsumexp (what the backward needs to rebuild the weights).
#: ``q``, ``k``, ``v`` share one float dtype and one batch shape; ``mask`` (present when the
#: ``mask`` flag is) broadcasts to ``[..., L, S]``: bool (True = may attend, PyTorch's
#: convention) or additive in the inputs' dtype.  ``causal`` hides ``j > i`` (top-left
#: aligned).  No dropout: core runs the decomposition when ``dropout_p > 0``.
scaled_dot_product_attention = Op("scaled_dot_product_attention", "composite", -1, _SDPA,
                                  result="same+stat", outputs=2, dtypes="float")
#: ``scaled_dot_product_attention_backward(g, q, k, v, out, lse, [mask], ...)`` ->
#: ``(dq, dk, dv)`` (the shapes of ``q``, ``k``, ``v``); the parameters are the forward's.
scaled_dot_product_attention_backward = Op("scaled_dot_product_attention_backward",
                                           "composite", -1, _SDPA, result="same*3", outputs=3,
                                           dtypes="float")

#: ``lstm_cell(gates_x[N, 4H], hc[N, 2H], w_hh[4H, H], [b_hh[4H]], bias=bool)`` ->
#: ``(hc'[N, 2H], gates[N, 4H])``: one LSTM step (PyTorch's gate order ``i, f, g, o``) after the
#: input projection of every step was done as one matmul.  The state ``hc`` is ``h`` and ``c``
#: side by side (Autodiff differentiates an op's first output, and both carry gradient);
#: ``gates`` holds the activated gates ``sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)`` for the
#: backward.  All tensors share one float dtype.
lstm_cell = Op("lstm_cell", "composite", -1, ("bias",), result="same*2", outputs=2,
               dtypes="float")
#: ``lstm_cell_backward(g[N, 2H], hc, w_hh, hc', gates, bias=)`` ->
#: ``(dgates_x[N, 4H], dhc[N, 2H], dw_hh[4H, H], db_hh[4H])``; ``db_hh`` is an empty ``(0,)``
#: tensor without a bias.  ``dgates_x`` is also the gradient of ``b_hh``'s pre-activation sum.
lstm_cell_backward = Op("lstm_cell_backward", "composite", 5, ("bias",), result="same*4",
                        outputs=4, dtypes="float")
#: ``gru_cell(gates_x[N, 3H], h[N, H], w_hh[3H, H], [b_hh[3H]], bias=bool)`` ->
#: ``(h'[N, H], work[N, 4H])``: one GRU step (gates ``r, z, n``, ``n = tanh(x_n + r * (W_hn h +
#: b_hn))``, ``h' = (1 - z) n + z h``); ``work`` holds ``r, z, n`` and ``W_hn h + b_hn``.
gru_cell = Op("gru_cell", "composite", -1, ("bias",), result="same*2", outputs=2,
              dtypes="float")
#: ``gru_cell_backward(g[N, H], h, w_hh, work, bias=)`` ->
#: ``(dgates_x[N, 3H], dh[N, H], dw_hh[3H, H], db_hh[3H])``; ``db_hh`` is empty without a bias.
gru_cell_backward = Op("gru_cell_backward", "composite", 4, ("bias",), result="same*4",
                       outputs=4, dtypes="float")
#: ``lstm_layer(gates_x[T, N, 4H], hc[N, 2H], w_hh[4H, H], [b_hh[4H]], bias=bool,
#: reverse=bool)`` -> ``(hcs[T, N, 2H], gates[T, N, 4H])``: `lstm_cell` over all T steps of one
#: layer and direction (``reverse``: from the last step to the first), ``hcs[t]`` the state
#: after step ``t`` and ``gates[t]`` its activated gates.  One op for the whole sequence, as
#: PyTorch's ``lstm``: its backward computes ``dw_hh`` as one matmul over every step.
lstm_layer = Op("lstm_layer", "composite", -1, ("bias", "reverse"), result="same*2", outputs=2,
                dtypes="float")
#: ``lstm_layer_backward(g[T, N, 2H], hc, w_hh, hcs, gates, bias=, reverse=)`` ->
#: ``(dgates_x[T, N, 4H], dhc[N, 2H], dw_hh[4H, H], db_hh[4H])``; ``db_hh`` is empty without a
#: bias.  ``g[t]`` is the gradient of ``hcs[t]`` from outside the layer.
lstm_layer_backward = Op("lstm_layer_backward", "composite", 5, ("bias", "reverse"),
                         result="same*4", outputs=4, dtypes="float")
#: ``gru_layer(gates_x[T, N, 3H], h[N, H], w_hh[3H, H], [b_hh[3H]], bias=bool, reverse=bool)``
#: -> ``(hs[T, N, H], work[T, N, 4H])``: `gru_cell` over all T steps (as `lstm_layer`).
gru_layer = Op("gru_layer", "composite", -1, ("bias", "reverse"), result="same*2", outputs=2,
               dtypes="float")
#: ``gru_layer_backward(g[T, N, H], h, w_hh, hs, work, bias=, reverse=)`` ->
#: ``(dgates_x[T, N, 3H], dh[N, H], dw_hh[3H, H], db_hh[3H])``; ``db_hh`` is empty without a bias.
gru_layer_backward = Op("gru_layer_backward", "composite", 5, ("bias", "reverse"),
                        result="same*4", outputs=4, dtypes="float")
#: ``fused_conv2d(x[N, C, H, W], w[O, C/groups, kh, kw], [bias[O]], [scale[O], shift[O],
#: mean[O], var[O]], [residual[N, O, OH, OW]], stride=, padding=, dilation=, groups=,
#: bias=bool, norm=bool, residual=bool, relu=bool, eps=)`` -> `conv2d` plus ``bias``, then
#: inference batch normalisation ``(y - mean) * scale / sqrt(var + eps) + shift`` (``norm``),
#: plus ``residual``, then ReLU (``relu``): a convolution and its epilogue, as inference
#: engines fuse them (ONNX import runs Conv -> BatchNormalization -> Add -> Relu chains so).
fused_conv2d = Op("fused_conv2d", "composite", -1,
                  ("stride", "padding", "dilation", "groups", "bias", "norm", "residual",
                   "relu", "eps"), dtypes="float")
