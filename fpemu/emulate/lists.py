"""Which torch function autocast treats how, per framework and device, as data.

``emulate`` applies a policy's lists itself, above autograd, to the torch functions a program
calls (``F.linear``, ``torch.matmul``, ``x @ w``, ``F.softmax``, ``F.cross_entropy``, ...):
torch's CPU autocast cannot be given CUDA's lists. A function is looked up by its name
(``func.__name__``; ``__matmul__`` is ``matmul``, ``__pow__`` is ``pow``). Categories:

* ``lower``: every eligible floating argument is cast to the policy's compute dtype;
* ``fp32``: every eligible floating argument is cast to float32;
* ``set_opt``: (``fp32_set_opt_dtype``) cast to float32 unless the caller passed ``dtype=``;
* ``promote``: every eligible floating argument is cast to the widest among them;
* ``fp32_out_lower``: computed in float32, the output cast to the compute dtype (Keras);
* ``banned``: refused inside an autocast region (CUDA's ``binary_cross_entropy``).

Eligible: a floating tensor that is not float64 (autocast never touches float64).

Sources (the project's research note amp.md, sections 2.1-2.3, which read torch 2.13's
``ATen/autocast_mode.h`` ``AT_FORALL_*`` macros and ``autocast_mode.cpp``; copied here as
data, never read at run time). Python functionals that torch decomposes before its autocast
sees them are listed under what the decomposition gets: on CUDA ``cross_entropy`` is
``log_softmax`` (fp32_set_opt_dtype) + ``nll_loss`` (fp32), so it is ``fp32``; ``softmin`` is
``softmax(-x)``; ``interpolate`` is the ``upsample_*`` family (fp32); ``grid_sample`` is
``grid_sampler``.

>>> lists_for("torch_cuda_fp16")["softmax"], lists_for("torch_cpu_bf16").get("softmax")
('set_opt', None)
>>> lists_for("torch_cuda_bf16")["linear"], lists_for("torch_cuda_bf16")["dot"]
('lower', 'promote')
"""

from __future__ import annotations

from typing import Any

__all__ = ["CPU", "CUDA", "function_name", "lists_for"]


def _cat(category: str, names: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), category)


#: torch 2.13 CUDA autocast (amp.md 2.2: autocast_mode.h AT_FORALL_LOWER_PRECISION_FP,
#: AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE; banned from the docs).
CUDA: dict[str, str] = {
    **_cat(
        "lower",
        "_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d "
        "conv_transpose3d convolution cudnn_convolution cudnn_convolution_transpose prelu addmm "
        "addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul "
        "linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell "
        "rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention "
        "scaled_dot_product_attention",
    ),
    **_cat(
        "fp32",
        "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow "
        "softplus layer_norm native_layer_norm rms_norm group_norm frobenius_norm nuclear_norm "
        "cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
        "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss "
        "margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
        "multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp "
        "interpolate upsample upsample_nearest upsample_bilinear "
        # norm.Scalar/ScalarOpt_dim are fp32_append_dtype: the same float32 evaluation
        "norm "
        # decompositions: log_softmax (set_opt -> fp32) + nll_loss (fp32)
        "cross_entropy",
    ),
    **_cat(
        "set_opt",
        "prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum softmin",
    ),
    **_cat(
        "promote",
        "addcdiv addcmul atan2 bilinear cross linalg_cross dot vdot grid_sampler grid_sample "
        "index_put tensordot scatter_add",
    ),
    "binary_cross_entropy": "banned",
}

#: torch 2.13 CPU autocast (amp.md 2.3: TORCH_LIBRARY_IMPL(aten, AutocastCPU)); fp16 uses the
#: bf16 lists. softmax, log_softmax, sum, exp, log, pow, layer_norm are NOT listed on CPU.
CPU: dict[str, str] = {
    **_cat(
        "lower",
        "conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm _addmm_activation addbmm linear "
        "_convolution matmul conv_tbc mkldnn_rnn_layer conv_transpose1d conv_transpose2d "
        "conv_transpose3d prelu scaled_dot_product_attention _native_multi_head_attention",
    ),
    **_cat(
        "fp32",
        "avg_pool3d binary_cross_entropy grid_sampler grid_sample polar prod quantile "
        "nanquantile stft cdist trace view_as_complex cholesky cholesky_inverse cholesky_solve "
        "inverse lu_solve orgqr ormqr pinverse max_pool3d max_unpool2d max_unpool3d "
        "adaptive_avg_pool3d reflection_pad1d reflection_pad2d replication_pad1d "
        "replication_pad2d replication_pad3d mse_loss cosine_embedding_loss nll_loss nll_loss2d "
        "hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy cross_entropy_loss "
        "l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss "
        "multi_margin_loss ctc_loss kl_div multilabel_margin_loss "
        "binary_cross_entropy_with_logits geqrf qr svd triangular_solve "
        "fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d",
    ),
    **_cat("promote", "cat stack index_copy"),
}

#: torch function name -> fpemu policy op (fpemu.amp.policy.OPS), for the non-torch presets
#: (Keras, Apex, ...), whose lists fpemu keeps per fpemu op.
_FPEMU_OPS: dict[str, str] = {
    "linear": "linear", "matmul": "matmul", "mm": "matmul", "bmm": "matmul",
    "addmm": "matmul", "baddbmm": "matmul", "add": "add", "mul": "mul", "relu": "relu",
    "gelu": "gelu", "tanh": "tanh", "sigmoid": "sigmoid", "softmax": "softmax",
    "log_softmax": "log_softmax", "cross_entropy": "cross_entropy", "mse_loss": "mse",
    "sum": "sum", "mean": "mean", "layer_norm": "layer_norm", "silu": "silu",
}  # fmt: skip
_FROM_POLICY = {"lower": "lower", "fp32": "fp32", "promote": "promote",
                "fp32_out_lower": "fp32_out_lower"}  # fmt: skip


def lists_for(policy: Any) -> dict[str, str]:
    """torch function name -> category for ``policy`` (a preset name or :class:`fpemu.Policy`).

    ``torch_cuda_*`` presets get CUDA's lists, ``torch_cpu_*`` CPU's; any other policy its own
    per-op categories (fpemu.amp.policy) mapped onto the torch functions that compute them.
    """
    from fpemu.amp.policy import get_policy  # noqa: PLC0415

    p = get_policy(policy)
    if p.name.startswith("torch_cuda_"):
        return CUDA
    if p.name.startswith("torch_cpu_"):
        return CPU
    out: dict[str, str] = {}
    for fn, op in _FPEMU_OPS.items():
        cat = p.category(op)
        if cat in _FROM_POLICY:
            out[fn] = _FROM_POLICY[cat]
    return out


def function_name(func: Any) -> str:
    """The name a torch function is listed under: ``Tensor.__matmul__`` -> ``matmul``.

    >>> import operator
    >>> function_name(operator.matmul), function_name(operator.pow)
    ('matmul', 'pow')
    """
    name = str(getattr(func, "__name__", ""))
    if name.startswith("__r") and name.endswith("__") and name not in ("__repr__",):
        return name[3:-2]
    if name.startswith("__") and name.endswith("__"):
        return name[2:-2]
    return name
