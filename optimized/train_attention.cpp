// optimized/train_attention.cpp — the training step's attention sublayers (train_attention.hpp):
// every one goes through the kernel under test, its views straight into the step's buffers.
// Dimension legend as in train_attention.hpp; S = a sequence's memory rows.
#include "optimized/train_attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "attncheck/error.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "optimized/attention_policy.hpp"
#include "optimized/decoder.hpp"

namespace attncheck::optimized::train_detail {

using reference::Sequence;
using reference::TrainMask;

Rows::Rows(const std::vector<Sequence>& batch) {
    for (const Sequence& s : batch) {
        const int T = int(s.tokens.size());
        row0.push_back(M);
        len.push_back(T);
        same_length = same_length && T == len.front();
        for (int t = 0; t < T; ++t) {
            seq.push_back(int(row0.size()) - 1);
            pos.push_back(t);
            token.push_back(s.tokens[std::size_t(t)]);
        }
        M += T;
        if (s.memory) {
            mem_row0.push_back(Ms);
            mem_len.push_back(s.memory->rows);
            mem_valid.push_back(s.memory->valid_len);
            memory.insert(memory.end(), s.memory->data.begin(), s.memory->data.end());
            Ms += s.memory->rows;
        }
    }
    q_pos.assign(batch.size(), 0);
}

namespace {

void check(int rc, bool backward, const std::string& what) {
    if (rc != 0)
        throw KernelError("training step: the attention kernel's " + std::string(backward ? "backward" : "forward") +
                          " returned " + std::to_string(rc) + " for " + what);
}

}  // namespace

// With rope, q and k are rotated in qkv in place by the forward, each row at its position within
// its sequence (no position table is added to the embeddings): the kernel's forward and backward
// read the rotated q and k, and the backward rotates dq and dk back before the projection's.
//
// A batch of sequences of one length is one dense call, its views straight into qkv [M, W]
// (sequence stride T * W, head stride dk, row stride W). Sequences of different lengths are one
// dense call each: a padded dense call would need kv_lens, and its padding query rows would be
// rows of the problem (read, computed, their out and dq written), which a kernel that supports
// dense calls need not support (kv_lens), and varlen is a layout a kernel may refuse; a call of
// one sequence with q_len = kv_len = T is what every kernel that takes a dense problem takes.
void self_attention(const TrainKernel& kernel, const PackedWeights& P, const Rows& rows, TrainMask mask, int layer,
                    float* qkv, float* att, float* lse, const float* datt, float* dqkv) {
    const ModelConfig& c = P.config;
    const int d = c.d_model, h = c.n_heads, hkv = c.kv_heads(), dk = c.head_dim(), B = int(rows.len.size());
    const std::int64_t W = P.qkv_width, kvd = std::int64_t(hkv) * dk;
    const bool whole = rows.same_length, rope = c.positional == Positional::rope;
    if (rope && !dqkv) rotate_qk(P, qkv, std::size_t(W), rows.M, rows.pos.data());
    for (int b0 = 0; b0 < B; b0 += whole ? B : 1) {
        const int nb = whole ? B : 1, T = rows.len[std::size_t(b0)], r0 = rows.row0[std::size_t(b0)];
        attncheck_problem_v2 p = make_problem_v2({.batch = nb, .q_heads = h, .kv_heads = hkv, .head_dim = dk,
                                                  .value_dim = dk, .causal = mask == TrainMask::causal,
                                                  .scale = float(1.0 / std::sqrt(double(dk)))});
        // The window's left edge (MODEL.md: row i sees keys t >= i - w). Its right edge stays -1
        // under either mask: causal, the mask is the right limit; none keeps the left edge only
        // (reference/decoder_grad.hpp: the window is the model's, the mask the thing forgotten).
        p.window_left = c.attn_window;
        p.window_right = -1;
        p.q_len = T;
        p.kv_len = T;
        p.q_pos = rows.q_pos.data();
        const auto view = [&](const float* base, std::int64_t row_stride) {
            return attncheck_tensor_v2{const_cast<float*>(base), {T * row_stride, dk, row_stride, 1}};
        };
        const float* q = qkv + std::size_t(r0) * std::size_t(W);
        p.q = view(q, W);
        p.k = view(q + d, W);
        p.v = view(q + d + kvd, W);
        p.out = view(att + std::size_t(r0) * std::size_t(d), d);
        p.lse = lse + std::size_t(r0) * std::size_t(h);
        p.lse_stride[0] = std::int64_t(h) * T;
        p.lse_stride[1] = T;
        p.lse_stride[2] = 1;
        int rc = 0;
        if (!dqkv) {
            rc = kernel.forward(&p);
        } else {
            float* dq = dqkv + std::size_t(r0) * std::size_t(W);
            attncheck_grads_v2 g{};
            g.struct_size = sizeof(attncheck_grads_v2);
            g.dout = view(datt + std::size_t(r0) * std::size_t(d), d);
            g.dq = view(dq, W);
            g.dk = view(dq + d, W);
            g.dv = view(dq + d + kvd, W);
            rc = kernel.backward(&p, &g);
        }
        check(rc, dqkv != nullptr,
              "layer " + std::to_string(layer) + " (" + std::to_string(nb) + " sequence(s) of " + std::to_string(T) +
                  " tokens, " + std::to_string(h) + " heads of " + std::to_string(dk) + " (" + std::to_string(hkv) +
                  " kv heads), mask " + reference::to_string(mask) + ", window " + std::to_string(c.attn_window) + ")");
    }
    if (rope && dqkv) rotate_qk_back(P, dqkv, std::size_t(W), rows.M, rows.pos.data());
}

// One dense call per sequence with kv_len = valid_len, not one call for the batch with kv_len = S
// and kv_lens = valid_len: kv_lens is a field a kernel may refuse (kernel_abi_v2.h), while q_len
// T over kv_len keys with no mask is a dense problem every kernel takes; the memory is short
// (its K/V rows are S, not T), so the calls are few and small. A sequence whose memory is all
// padding (valid_len 0) calls nothing: its rows see no key, their output is 0 and they send no
// gradient (MODEL.md §layer), which a problem with kv_len 0 would ask of the kernel.
void cross_attention(const TrainKernel& kernel, const PackedWeights& P, const Rows& rows, int layer, const float* cq,
                     const float* ckv, float* att, float* lse, const float* datt, float* dcq, float* dckv) {
    const ModelConfig& c = P.config;
    const int d = c.d_model, h = c.n_heads, dk = c.head_dim(), B = int(rows.len.size());
    const std::size_t ud = std::size_t(d);
    for (int b = 0; b < B; ++b) {
        const std::size_t ub = std::size_t(b);
        const int T = rows.len[ub], r0 = rows.row0[ub], m0 = rows.mem_row0[ub], S = rows.mem_len[ub],
                  valid = rows.mem_valid[ub];
        float* dkv = dcq ? dckv + std::size_t(m0) * 2 * ud : nullptr;  // [S, 2d] this sequence's
        if (valid == 0) {
            if (!dcq) {
                std::fill_n(att + std::size_t(r0) * ud, std::size_t(T) * ud, 0.0f);
            } else {
                std::fill_n(dcq + std::size_t(r0) * ud, std::size_t(T) * ud, 0.0f);
                std::fill_n(dkv, std::size_t(S) * 2 * ud, 0.0f);
            }
            continue;
        }
        attncheck_problem_v2 p = make_problem_v2({.batch = 1, .q_heads = h, .kv_heads = h, .head_dim = dk, .value_dim = dk,
                                                  .causal = false, .scale = float(1.0 / std::sqrt(double(dk)))});
        p.q_len = T;
        p.kv_len = valid;
        p.q_pos = rows.q_pos.data();
        const auto view = [&](const float* base, std::int64_t row_stride, int n) {
            return attncheck_tensor_v2{const_cast<float*>(base), {n * row_stride, dk, row_stride, 1}};
        };
        const float* kv = ckv + std::size_t(m0) * 2 * ud;
        p.q = view(cq + std::size_t(r0) * ud, d, T);
        p.k = view(kv, 2 * d, valid);
        p.v = view(kv + d, 2 * d, valid);
        p.out = view(att + std::size_t(r0) * ud, d, T);
        p.lse = lse + std::size_t(r0) * std::size_t(h);
        p.lse_stride[0] = std::int64_t(h) * T;
        p.lse_stride[1] = T;
        p.lse_stride[2] = 1;
        int rc = 0;
        if (!dcq) {
            rc = kernel.forward(&p);
        } else {
            attncheck_grads_v2 g{};
            g.struct_size = sizeof(attncheck_grads_v2);
            g.dout = view(datt + std::size_t(r0) * ud, d, T);
            g.dq = view(dcq + std::size_t(r0) * ud, d, T);
            g.dk = view(dkv, 2 * d, valid);
            g.dv = view(dkv + d, 2 * d, valid);
            rc = kernel.backward(&p, &g);
            std::fill_n(dkv + std::size_t(valid) * 2 * ud, std::size_t(S - valid) * 2 * ud, 0.0f);  // padding
        }
        check(rc, dcq != nullptr,
              "layer " + std::to_string(layer) + "'s cross-attention (sequence " + std::to_string(b) + ": " +
                  std::to_string(T) + " tokens over " + std::to_string(valid) + " memory rows, " + std::to_string(h) +
                  " heads of " + std::to_string(dk) + ")");
    }
}

}  // namespace attncheck::optimized::train_detail
