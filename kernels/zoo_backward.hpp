// kernels/zoo_backward.hpp — the backward pass's mutant zoo's entries for the kernel registry
// (kernels/registry.hpp): one correct backward of attncheck/kernel_abi_v2.h (attncheck_grads_v2)
// and its mutants, defined in kernels/zoo_backward.cpp. Every entry has fn = nullptr, the float64
// reference kernel as its forward in fn_v2 (attncheck_reference_kernel_v2: correct, so a mutant's
// forward passes everything) and its backward in backward_v2: the bugs are in the backward only.
//
// What a harness needs to expose each mutant (each is wrong by far more than float32 rounding,
// but only on some calls):
//   - bwd_d_term_dropped, bwd_d_sign_flipped, bwd_p_unnormalised, bwd_dv_from_ds,
//     bwd_d_over_all_keys (the latter with a mask that hides keys of the sequence, e.g. causal)
//     need a row that sees more than one key with a dout that is not 0; bwd_lse_read_as_log2 an
//     lse far from 0.
//   - bwd_causal_forgotten needs causal with a future key of some row inside the sequence's keys
//     (prefill); bwd_window_off_by_one a window whose left edge is inside the keys;
//     bwd_mask_top_left a q_pos[b] != 0 that moves the mask (causal or windowed).
//   - bwd_alibi_forgotten needs ALiBi slopes != 0; bwd_alibi_row_relative slopes != 0 and
//     q_pos[b] != 0.
//   - bwd_softcap_derivative_dropped / _linear need softcap > 0 with scores near the cap (tanh
//     far from 0).
//   - bwd_dk_unscaled / bwd_dq_unscaled need scale != 1.
//   - bwd_gqa_last_head_wins needs q_heads > kv_heads; bwd_gqa_head_modulo 1 < kv_heads < q_heads.
//   - bwd_padding_rows_unwritten needs dense kv_lens[b] < kv_len, with dk/dv poisoned before the
//     call; bwd_unseen_keys_unwritten a key no row sees (a window, or causal with q_pos + Tq < Tk),
//     with dk/dv poisoned.
//   - bwd_empty_row_nan needs a row with no visible key in a sequence where other rows see keys.
//   - bwd_varlen_dkv_from_q needs varlen with cu_seqlens_q != cu_seqlens_k; it may write outside
//     dk and dv (writes_out_of_bounds).
//   - bwd_dq_block_overwrite needs a row that sees keys in two 64-key blocks (Tk > 64).
//   - bwd_dout_with_out_strides needs dout strides other than out's; it may read outside dout
//     (reads_out_of_bounds).
// For the backward, writes_out_of_bounds means outside dq, dk and dv, reads_out_of_bounds outside
// dout: only an isolated worker (or guard pages) may run those two unguarded.
#pragma once

#include <vector>

#include "kernels/registry.hpp"

namespace attncheck {

// bwd_naive, then every backward mutant (bwd_<bug>), in a fixed order.
std::vector<KernelEntry> zoo_backward_entries();

}  // namespace attncheck
