// kernels/mutants.hpp — the mutant zoo's entries for the kernel registry (kernels/registry.hpp):
// the zoo's two correct base kernels and its mutants, defined in kernels/mutants.cpp.
//
// What a harness needs to kill each mutant (each is observable through the ABI, but only on
// some problems and only if the harness looks):
//   - oob_write writes out[B*H*Tq*Dv], one float past the end of out: call a mutant whose entry
//     has writes_out_of_bounds only with guard elements after out (a std::vector of exactly the
//     right size is a heap overflow), or in an isolated worker (properties/isolation/isolation.hpp).
//   - accumulates_into_out adds into out instead of overwriting it: fill out with a poison
//     value (NaN or random) before each call; a zeroed out never shows it.
//   - input_modified rescales q in place: visible only when scale != 1.
//   - no_max_subtraction needs scores above ~88 (exp overflows float32); nan_on_empty_row needs
//     a row with no visible key (kv_valid_len[b] = 0).
//   - heads_mixed needs H > 1; batch_head_transposed needs B > 1 and H > 1;
//     padding_from_first_sequence needs B > 1 with different kv_valid_len.
//   - online_rescale_forgotten needs Tk > 2 (key tiles of 2) with a larger score in a later tile.
//   - causal_ignores_q_offset needs causal with q_offset > 0; causal_bottom_right needs causal
//     with q_offset + q_len != kv_len, a valid problem no decoder produces (kernel level only).
//   - tile_edge_key_dropped needs Tk > 64, split_k_chunk_lost Tq <= 64 and Tk > 512,
//     lane_remainder_dropped head_dim >= 64 with head_dim % 16 != 0.
//   - nondeterministic moves the output by one ulp on every other call: the same call twice,
//     compared bitwise.
// Every mutant refuses a malformed problem exactly as the built-in kernels do, so "unsupported"
// never hides a bug.
#pragma once

#include <vector>

#include "kernels/registry.hpp"

namespace attncheck {

// zoo_base, zoo_online_base, then every mutant, in a fixed order.
std::vector<KernelEntry> zoo_entries();

}  // namespace attncheck
