"""PyTorch's scaled dot-product attention (Debian's python3-torch 1.13:
torch.nn.functional._scaled_dot_product_attention, the CPU build) as attention kernels, checked
with attncheck as they are (test_torch_sdpa.py; docs/python.md says what the check finds).

Two ways a kernel author calls it:
  sdpa_is_causal  the causal problem through is_causal=True, the first thing one writes
  sdpa_masked     the visibility of every (row, key) pair as a boolean attn_mask built from the
                  problem's positions, windows and key counts
Both run through attncheck.torch.wrap: the problem's tensors as torch tensors, no copy."""

import torch
import torch.nn.functional as F

import attncheck
import attncheck.torch

# What both support: dense [B, H, T, D] tensors of any strides, grouped-query heads (the kv heads
# repeated), float32 (float16 has no CPU matmul in 1.13; bfloat16 is checked in the tests), no
# softcap, ALiBi, sinks or log-sum-exp output.
SUPPORTS = "dtype=f32; varlen=no; paged=no; softcap=no; alibi=no; lse=no"
# A row with no visible key comes out NaN (softmax over nothing): PyTorch's convention, declared.
DECLARE = SUPPORTS + "; empty_rows=nan"
# is_causal has no notion of positions or key counts: no padding, no windows either.
DECLARE_IS_CAUSAL = SUPPORTS + "; padding=no; window=no"


def _kv(p):
    k, v = p.k, p.v
    if p.kv_heads != p.q_heads:
        k = k.repeat_interleave(p.q_heads // p.kv_heads, dim=1)
        v = v.repeat_interleave(p.q_heads // p.kv_heads, dim=1)
    return k, v


def _scaled_q(p):
    # 1.13's function has no scale argument: it divides by sqrt(head_dim), so q carries the rest
    # (left alone at the default scale: a factor near 1 would round a bfloat16 q once more).
    factor = p.scale * p.head_dim ** 0.5
    return p.q if abs(factor - 1.0) < 1e-6 else p.q * factor


def sdpa_is_causal(p, declare=DECLARE_IS_CAUSAL):
    attncheck.require_declared(p.problem, declare)
    k, v = _kv(p)
    out, _ = F._scaled_dot_product_attention(_scaled_q(p), k, v, None, 0.0, False, bool(p.causal))
    return out


def visibility(p):
    """[B, 1, q_len, kv_len] booleans: key j visible to row i of sequence b (the ABI's rule)."""
    a = p.q_pos.long()[:, None, None, None] + torch.arange(p.q_len)[None, None, :, None]
    j = torch.arange(p.kv_len)[None, None, None, :]
    keys = p.kv_lens.long() if p.kv_lens is not None else torch.full((p.batch,), p.kv_len)
    vis = j < keys[:, None, None, None]
    if p.causal:
        vis = vis & (j <= a)
    if p.window_left >= 0:
        vis = vis & (j >= a - p.window_left)
    if not p.causal and p.window_right >= 0:
        vis = vis & (j <= a + p.window_right)
    return vis


def sdpa_masked(p, declare=DECLARE):
    attncheck.require_declared(p.problem, declare)
    k, v = _kv(p)
    vis = visibility(p)
    # Keys no row sees (padding past a sequence's count among them) may hold NaN: 1.13 masks by
    # adding -inf to the scores (NaN + -inf is NaN) and weights v by 0 (NaN * 0 is NaN), so those
    # keys and values are zeroed first.
    seen = vis.any(dim=2, keepdim=True).transpose(2, 3)  # [B, 1, kv_len, 1]
    zero = torch.zeros((), dtype=v.dtype)
    k, v = torch.where(seen, k, zero), torch.where(seen, v, zero)
    out, _ = F._scaled_dot_product_attention(_scaled_q(p), k, v, vis, 0.0, False, False)
    return out
