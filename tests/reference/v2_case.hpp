// tests/reference/v2_case.hpp — a version 2 attention problem with its own storage, for the
// tests of the v2 oracle: a description (Spec) of the sequences, the layout and the features,
// from which V2Case builds the attncheck_problem_v2 and its buffers.
//
// Every buffer holds more elements than the problem addresses (layout gaps, padding rows, unused
// cache blocks): those are filled with a "padding" value (NaN by default) that no correct reading
// of the problem may reach. Logical elements are set through the ABI's own offsets.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"

namespace attncheck::test {

enum class Layout { bhtd, bthd };

struct Spec {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    int batch = 1, q_heads = 1, kv_heads = 1, head_dim = 2, value_dim = 2;
    std::vector<int> tq = {1}, tk = {1};  // per sequence
    std::vector<int> q_pos = {0};         // per sequence
    int kv_capacity = 0;                  // dense k/v rows per sequence (0: the largest tk)
    bool kv_lens = false;                 // dense: pass kv_lens (else every tk must be the capacity)
    Layout layout = Layout::bhtd;
    int row_gap = 0;                      // extra elements after each row (a view with gaps)
    bool varlen = false;                  // cu_seqlens_q / cu_seqlens_k
    int block_size = 0;                   // > 0: paged k/v with a shuffled block table
    int spare_blocks = 0;                 // unused blocks in the paged cache
    bool causal = true;
    int window_left = -1, window_right = -1;
    float scale = 1.0f, softcap = 0.0f;
    std::vector<float> alibi = {};        // empty, or Hq slopes
    bool lse = true;
};

// A contiguous-with-gaps view: rows of `heads` x `width` elements in the chosen layout.
struct View {
    std::int64_t stride[4] = {0, 0, 0, 0};
    std::int64_t size = 0;  // elements spanned
};
inline View make_view(Layout layout, int outer, int heads, int rows, int width, int gap) {
    View v;
    const std::int64_t w = width + gap;
    if (layout == Layout::bhtd) {
        v.stride[3] = 1, v.stride[2] = w, v.stride[1] = w * rows, v.stride[0] = w * rows * heads;
    } else {
        v.stride[3] = 1, v.stride[1] = w, v.stride[2] = w * heads, v.stride[0] = w * heads * rows;
    }
    v.size = v.stride[0] * outer;
    return v;
}

// Storage of one tensor in the problem's dtype.
struct Buffer {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    std::vector<float> f32;
    std::vector<std::uint16_t> half;
    void resize(std::int32_t t, std::int64_t n, float fill) {
        dtype = t;
        f32.clear();
        half.clear();
        if (t == ATTNCHECK_DTYPE_F32)
            f32.assign(std::size_t(n), fill);
        else
            half.assign(std::size_t(n), t == ATTNCHECK_DTYPE_F16 ? float_to_f16(fill) : float_to_bf16(fill));
    }
    void* data() { return dtype == ATTNCHECK_DTYPE_F32 ? static_cast<void*>(f32.data()) : static_cast<void*>(half.data()); }
    std::int64_t size() const { return std::int64_t(dtype == ATTNCHECK_DTYPE_F32 ? f32.size() : half.size()); }
    void set(std::int64_t i, float x) { store_element(dtype, data(), i, x); }
    float get(std::int64_t i) { return load_element(dtype, data(), i); }
};

class V2Case {
public:
    Spec spec;
    attncheck_problem_v2 p{};
    Buffer q, k, v, out;
    std::vector<float> lse;
    std::vector<std::int32_t> q_pos, kv_lens, cu_q, cu_k, block_table;
    std::vector<float> slopes;
    std::int64_t out_guard = 0;  // elements before and after out's view (lse: the same)

    explicit V2Case(const Spec& s, float padding = std::numeric_limits<float>::quiet_NaN()) : spec(s) {
        const int B = s.batch;
        if (int(s.tq.size()) != B || int(s.tk.size()) != B || int(s.q_pos.size()) != B)
            throw std::invalid_argument("V2Case: tq, tk and q_pos need one entry per sequence");
        for (int b = 0; b < B && !s.varlen; ++b) {
            if (s.tq[std::size_t(b)] != s.tq[0])
                throw std::invalid_argument("V2Case: dense sequences share one q_len (use varlen)");
            if (!s.kv_lens && !s.block_size && s.tk[std::size_t(b)] != std::max(s.kv_capacity, s.tk[0]))
                throw std::invalid_argument("V2Case: dense keys without kv_lens fill the capacity");
        }
        p = attncheck::make_problem_v2({.dtype = s.dtype, .batch = B, .q_heads = s.q_heads, .kv_heads = s.kv_heads,
                                        .head_dim = s.head_dim, .value_dim = s.value_dim, .causal = bool(s.causal),
                                        .window_left = s.window_left, .window_right = s.window_right,
                                        .scale = s.scale, .softcap = s.softcap});
        p.q_len = *std::max_element(s.tq.begin(), s.tq.end());
        const int tk_max = *std::max_element(s.tk.begin(), s.tk.end());
        p.kv_len = std::max({1, s.kv_capacity, tk_max});  // >= 1 even when every sequence is empty
        q_pos.assign(s.q_pos.begin(), s.q_pos.end());
        p.q_pos = q_pos.data();
        if (!s.alibi.empty()) {
            slopes = s.alibi;
            p.alibi_slopes = slopes.data();
        }

        int q_rows = p.q_len, q_outer = B;  // rows of q per outer index, outer count
        int kv_rows = p.kv_len, kv_outer = B;
        if (s.varlen) {
            cu_q.assign(1, 0);
            cu_k.assign(1, 0);
            for (int b = 0; b < B; ++b) {
                cu_q.push_back(cu_q.back() + s.tq[std::size_t(b)]);
                cu_k.push_back(cu_k.back() + s.tk[std::size_t(b)]);
            }
            p.cu_seqlens_q = cu_q.data();
            q_rows = cu_q.back(), q_outer = 1;
        } else if (s.kv_lens || s.block_size > 0) {
            kv_lens.assign(s.tk.begin(), s.tk.end());
            p.kv_lens = kv_lens.data();
        }
        if (s.block_size > 0) {
            // Each sequence gets its blocks from a shuffled pool, plus spare blocks nobody uses.
            p.block_size = s.block_size;
            int need_max = 0, total = 0;
            for (int b = 0; b < B; ++b) {
                const int need = (s.tk[std::size_t(b)] + s.block_size - 1) / s.block_size;
                need_max = std::max(need_max, need);
                total += need;
            }
            p.num_blocks = std::max(1, total + s.spare_blocks);
            p.block_table_stride = std::max(1, need_max + 1);
            std::vector<std::int32_t> pool(std::size_t(p.num_blocks));
            std::iota(pool.begin(), pool.end(), 0);
            std::mt19937 shuffle_rng(std::uint32_t(total * 7919 + B));
            std::shuffle(pool.begin(), pool.end(), shuffle_rng);
            // Entries past a sequence's need hold a block that exists but must not be read.
            block_table.assign(std::size_t(B) * std::size_t(p.block_table_stride), pool.back());
            std::size_t next = 0;
            for (int b = 0; b < B; ++b) {
                const int need = (s.tk[std::size_t(b)] + s.block_size - 1) / s.block_size;
                for (int e = 0; e < need; ++e) block_table[std::size_t(b * p.block_table_stride + e)] = pool[next++];
            }
            p.block_table = block_table.data();
            kv_rows = s.block_size, kv_outer = p.num_blocks;
        } else if (s.varlen) {
            p.cu_seqlens_k = cu_k.data();
            kv_rows = cu_k.back(), kv_outer = 1;
        }

        const View qv = make_view(s.layout, q_outer, s.q_heads, q_rows, s.head_dim, s.row_gap);
        const View kv = make_view(s.layout, kv_outer, s.kv_heads, kv_rows, s.head_dim, s.row_gap);
        const View vv = make_view(s.layout, kv_outer, s.kv_heads, kv_rows, s.value_dim, s.row_gap);
        const View ov = make_view(s.layout, q_outer, s.q_heads, q_rows, s.value_dim, s.row_gap);
        q.resize(s.dtype, std::max<std::int64_t>(qv.size, 1), padding);
        k.resize(s.dtype, std::max<std::int64_t>(kv.size, 1), padding);
        v.resize(s.dtype, std::max<std::int64_t>(vv.size, 1), padding);
        // out sits in the middle of a larger buffer: guard elements on both sides.
        out_guard = 16;
        out.resize(s.dtype, ov.size + 2 * out_guard, kOutSentinel);
        bind(p.q, q.data(), qv, 0);
        bind(p.k, k.data(), kv, 0);
        bind(p.v, v.data(), vv, 0);
        bind(p.out, out.data(), ov, out_guard);
        if (s.lse) {
            // lse [B, Hq, Tq] (varlen: [rows, Hq]), guarded too.
            if (s.varlen) {
                p.lse_stride[0] = 0, p.lse_stride[1] = 1, p.lse_stride[2] = s.q_heads;
                lse.assign(std::size_t(q_rows * s.q_heads + 2 * out_guard), kOutSentinel);
            } else {
                p.lse_stride[2] = 1, p.lse_stride[1] = p.q_len, p.lse_stride[0] = std::int64_t(p.q_len) * s.q_heads;
                lse.assign(std::size_t(B * s.q_heads * p.q_len + 2 * out_guard), kOutSentinel);
            }
            p.lse = lse.data() + out_guard;
        }
    }
    V2Case(const V2Case&) = delete;
    V2Case& operator=(const V2Case&) = delete;

    static constexpr float kOutSentinel = -12288.0f;  // exact in f32, f16 and bf16

    // Logical elements (values rounded to the dtype when set).
    std::int64_t q_at(int b, int h, int i, int c) const { return q_offset_v2(p, p.q, b, h, i, c); }
    std::int64_t k_at(int b, int hk, int j, int c) const { return kv_offset_v2(p, p.k, b, hk, j, c); }
    std::int64_t v_at(int b, int hk, int j, int c) const { return kv_offset_v2(p, p.v, b, hk, j, c); }
    std::int64_t out_at(int b, int h, int i, int c) const { return out_guard + q_offset_v2(p, p.out, b, h, i, c); }

    int tq(int b) const { return spec.tq[std::size_t(b)]; }
    int tk(int b) const { return spec.tk[std::size_t(b)]; }

    // Sets every logical element of q, k, v from gen() (a float, rounded to the dtype).
    template <class Gen> void fill(Gen&& gen) {
        for (int b = 0; b < p.batch; ++b) {
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < tq(b); ++i)
                    for (int c = 0; c < p.head_dim; ++c) q.set(q_at(b, h, i, c), gen());
            for (int hk = 0; hk < p.kv_heads; ++hk)
                for (int j = 0; j < tk(b); ++j) {
                    for (int c = 0; c < p.head_dim; ++c) k.set(k_at(b, hk, j, c), gen());
                    for (int c = 0; c < p.value_dim; ++c) v.set(v_at(b, hk, j, c), gen());
                }
        }
    }

private:
    // t views `data` from element `offset` on (out: past its leading guard).
    void bind(attncheck_tensor_v2& t, void* data, const View& v, std::int64_t offset) const {
        t.data = static_cast<char*>(data) + offset * std::int64_t(dtype_size(spec.dtype));
        for (int d = 0; d < 4; ++d) t.stride[d] = v.stride[d];
    }
};

}  // namespace attncheck::test
