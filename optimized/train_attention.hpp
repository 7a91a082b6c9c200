// optimized/train_attention.hpp — the attention sublayers of the float32 training step
// (train_step.cpp): where the batch's rows sit, and the self-attention's forward and backward
// through the kernel under test (a version 2 forward with lse, then its backward). Internal to
// optimized/.
//
// Dimension legend as in train_step.hpp, and hkv = kv heads (n_kv_heads), W = d + 2 hkv dk (the
// columns of a qkv row: q, then k, then v), M = sum_b T_b.
#pragma once

#include <cstdint>
#include <vector>

#include "optimized/train_step.hpp"
#include "optimized/weights.hpp"

namespace attncheck::optimized::train_detail {

// Where the sequences sit among the M rows: sequence b at rows row0[b] .. row0[b] + T_b - 1 of
// every [M, *] buffer (no padding).
struct Rows {
    int M = 0;
    std::vector<int> row0, len;       // [B]
    std::vector<int> seq, pos;        // [M]: the sequence and the position of each row
    std::vector<int> token;           // [M]
    std::vector<std::int32_t> q_pos;  // [B] zeros: every sequence starts at position 0
    bool same_length = true;
    // Cross-attention only: sequence b's memory at rows mem_row0[b] .. mem_row0[b] + mem_len[b] - 1
    // of memory, its first mem_valid[b] rows its keys, the rest padding (projected, never seen).
    int Ms = 0;                                     // memory rows of the batch
    std::vector<int> mem_row0, mem_len, mem_valid;  // [B]
    std::vector<float> memory;                      // [Ms, d]

    explicit Rows(const std::vector<reference::Sequence>& batch);
};

// The self-attention of layer `layer` through the kernel, on qkv [M, W] as the projection wrote
// it (with rope, the forward rotates q and k in it, in place). Forward (dqkv null): att [M, d] (heads concatenated) and lse [h * M] (sequence b's [h, T_b]
// block at h * row0[b]). Backward: dqkv [M, W] from datt [M, d], for the forward as it was called.
void self_attention(const TrainKernel& kernel, const PackedWeights& P, const Rows& rows, reference::TrainMask mask,
                    int layer, float* qkv, float* att, float* lse, const float* datt, float* dqkv);

// The cross-attention of layer `layer`: queries cq [M, d], keys and values ckv [Ms, 2d] (k then
// v, projected from the memory), no causal mask, no window, h kv heads. Forward (dcq null): att
// [M, d], lse [h * M]. Backward: dcq [M, d] and dckv [Ms, 2d] from datt, for the forward as it
// was called; dckv is 0 on the padding rows, so the projection's dW gets nothing from them.
void cross_attention(const TrainKernel& kernel, const PackedWeights& P, const Rows& rows, int layer, const float* cq,
                     const float* ckv, float* att, float* lse, const float* datt, float* dcq, float* dckv);

}  // namespace attncheck::optimized::train_detail
