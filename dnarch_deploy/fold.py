"""A block's width masks and depth weight multiplied into its weights, as one autograd node.

Slicing six parameters and three masks and multiplying them in costs ~25 tiny autograd nodes per
block; on CPU their fixed per-node cost was ~5% of a small network's training step. The forward
is :meth:`dnarch_deploy.model.Block.folded`'s slices and products; the backward writes out their
gradients (zero past each slice).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


class FoldWidthMasks(torch.autograd.Function):
    """:meth:`Block.folded` with width masks, as one autograd node.

    Slicing six parameters and three masks and multiplying them in costs ~25 tiny autograd nodes
    per block; on CPU their fixed per-node cost was ~5% of a small network's training step. The
    gradients are those of the slices and products written out: zero past each slice.
    """

    @staticmethod
    def forward(ctx, norm_w, norm_b, w1, b1, w2, b2, masks, depth_weight, sizes):
        n_in, n_mid, n_out = sizes
        m_in, m_mid, m_out = masks[0, :n_in], masks[1, :n_mid], masks[2, :n_out]
        scale = m_out if depth_weight is None else m_out * depth_weight
        ctx.save_for_backward(norm_w, norm_b, w1, b1, w2, b2, masks, depth_weight)
        w2, b2 = w2[:n_out, :n_mid] * scale[:, None], b2[:n_out] * scale
        return (norm_w[:n_in] * m_in, norm_b[:n_in] * m_in,
                w1[:n_mid, :n_in] * m_mid[:, None], b1[:n_mid] * m_mid, w2, b2)

    @staticmethod
    def backward(ctx, g_norm_w, g_norm_b, g_w1, g_b1, g_w2, g_b2):
        # on the parameters' whole (H,) and (H, H) shapes: each incoming gradient padded with
        # zeros past its slice (nothing to pad at full width), so no saved tensor is sliced and
        # each mask's gradient is one whole row (at these sizes the count of operators is the
        # backward's cost)
        norm_w, norm_b, w1, b1, w2, b2, masks, depth_weight = ctx.saved_tensors
        H = masks.shape[1]

        def pad(grad: Tensor) -> Tensor:
            pads = [p for n in reversed(grad.shape) for p in (0, H - n)]
            return F.pad(grad, pads) if any(pads) else grad

        g_norm_w, g_norm_b, g_w1, g_b1, g_w2, g_b2 = map(
            pad, (g_norm_w, g_norm_b, g_w1, g_b1, g_w2, g_b2))
        m_in, m_mid, m_out = masks.unbind(0)
        scale = m_out if depth_weight is None else m_out * depth_weight
        g_scale = (g_w2 * w2).sum(1) + g_b2 * b2
        g_m_out = g_scale if depth_weight is None else g_scale * depth_weight
        g_depth = None if depth_weight is None else (g_scale * m_out).sum()
        g_w2, g_b2 = g_w2 * scale[:, None], g_b2 * scale
        g_masks = torch.stack([g_norm_w * norm_w + g_norm_b * norm_b,
                               (g_w1 * w1).sum(1) + g_b1 * b1, g_m_out])
        return (g_norm_w * m_in, g_norm_b * m_in, g_w1 * m_mid[:, None], g_b1 * m_mid,
                g_w2, g_b2, g_masks, g_depth, None)
