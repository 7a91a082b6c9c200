// kernels/zoo_v2.hpp — the version 2 mutant zoo's entries for the kernel registry
// (kernels/registry.hpp): two correct v2 kernels of different shapes and their mutants, defined
// in kernels/zoo_v2.cpp. Every entry has fn = nullptr and its entry point in fn_v2
// (attncheck/kernel_abi_v2.h).
//
// What a harness needs to expose each mutant (each is observable through the ABI, but only on
// some problems):
//   - v2_gqa_head_modulo needs 1 < kv_heads < q_heads (MHA and MQA map heads the same way).
//   - v2_window_both_sides needs a non-causal window with window_right != window_left;
//     v2_window_off_by_one a window whose left edge is inside the keys; v2_window_top_left a
//     q_pos[b] != 0; v2_causal_from_capacity q_pos[b] != kv_len - Tq(b) (kv_lens below the
//     capacity, or a chunk that is not the last one).
//   - v2_padding_times_zero needs NaN or Inf (or large values) in the key/value padding of a
//     sequence's last key tile (rows past kv_lens[b], within kv_len or the last block).
//   - v2_paged_capacity_keys needs a paged cache with kv_lens[b] < kv_len and keys past
//     kv_lens[b] visible (non-causal, or q_pos past them).
//   - v2_tile_tail_dropped needs a visible key in a partial 96-key tile after a full one
//     (Tk = 97: the decode step's last key).
//   - v2_f16_exp_unshifted needs dtype f16 and a score above ~11 (exp overflows float16).
//   - v2_softcap_after_mask needs softcap > 0 and a masked key inside a tile that holds visible
//     ones; v2_softcap_before_scale softcap > 0 and scale != 1.
//   - v2_lse_log2 needs lse; v2_empty_row_lse_zero lse and a row with no visible key.
//   - v2_alibi_sign_flipped needs alibi slopes != 0 and more than one visible key;
//     v2_alibi_row_relative q_pos[b] != 0 and lse (its bias is off by the same amount for every
//     key of a row, which the softmax cancels: out stays right).
//   - v2_k_rows_contiguous needs k.stride[2] != head_dim ([B,T,H,D] with Hk > 1, or gaps);
//     v2_varlen_k_from_q varlen with cu_seqlens_q != cu_seqlens_k; v2_bf16_read_as_f16 bf16.
//   - v2_window_right_ignored needs a non-causal window_right that hides keys;
//     v2_table_stride_from_capacity a paged batch of B > 1 whose block_table_stride is not
//     ceil(kv_len / block_size); v2_lse_contiguous lse strides other than [B, Hq, Tq]'s;
//     v2_block_row_pow2_mask a paged cache whose block_size is not a power of two, with a
//     visible key j where j & (block_size - 1) != j % block_size (block_size 3: j = 1 or 3).
// The entries with reads_out_of_bounds may read outside k, v or block_table on some problems
// (the four whose bug is in the addressing of the inputs), v2_lse_contiguous (writes_out_of_bounds)
// may write outside lse: only an isolated worker may run them unguarded.
#pragma once

#include <vector>

#include "kernels/registry.hpp"

namespace attncheck {

// v2_naive, v2_tiled, then every v2 mutant, in a fixed order.
std::vector<KernelEntry> zoo_v2_entries();

}  // namespace attncheck
