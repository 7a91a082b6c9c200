// tests/zoo/spec_v2.hpp — a version 2 call in words (Spec), the problem it describes, and a random
// Spec of every feature, for the tests of the version 2 zoo (zoo_v2_test.cpp, the forward) and of
// the backward zoo (zoo_backward_cases.hpp, for zoo_backward_test.cpp and
// zoo_backward_mutants_test.cpp): each builds its own buffers from a Spec, through the same
// problem, strides and key values.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"

namespace zoo_test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

enum class Layout { bhtd, bthd, gapped };
enum class Mode { dense, varlen, paged };

// One call in words. The forward reads every field but grad_layout and sinks; a backward takes
// neither a block table nor a call without lse.
struct Spec {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    int Hq = 2, Hk = 2, Dk = 8, Dv = 8;
    std::vector<int> q_rows = {6};  // Tq(b) per sequence (dense: all equal)
    std::vector<int> keys = {6};    // Tk(b) per sequence
    std::vector<int> q_pos = {0};
    int capacity = 0;               // dense kv_len; 0: the largest Tk(b)
    bool with_kv_lens = false;
    Mode mode = Mode::dense;
    int block_size = 4;                  // paged
    bool table_covers_capacity = false;  // paged: valid blocks for all kv_len keys (else -1 past a sequence's)
    Layout layout = Layout::bhtd;        // q, k, v, out
    Layout grad_layout = Layout::bhtd;   // the backward's dout, dq, dk, dv
    int causal = 1, window_left = -1, window_right = -1;
    float scale = 0.3f, softcap = 0.0f;
    bool alibi = false, lse = true;
    bool lse_rows_outer = false;  // lse laid out [B, Tq, Hq] (else the contiguous [B, Hq, Tq])
    // Every k/v element that is not a key's (padding rows, gaps, unused blocks), and every key
    // that no query row sees (outside every row's window, past the last row's position).
    float padding = kNaN;
    float magnitude = 1.0f;  // inputs uniform in [-magnitude, magnitude]
    std::uint32_t seed = 1;
    std::vector<float> sinks = {};  // the backward's: empty, or Hq logits
};

inline Spec prefill(int n) {
    Spec s;
    s.q_rows = {n}, s.keys = {n}, s.q_pos = {0};
    return s;
}
inline Spec decode(int keys) {
    Spec s;
    s.q_rows = {1}, s.keys = {keys}, s.q_pos = {keys - 1};
    return s;
}

// Strides of a (n0, H, T, D) tensor in a layout; the elements it spans. A paged cache is
// [blocks, block_size, Hk, D]: its bhtd / bthd are the row-major orders of (block, head, row) /
// (block, row, head) as for dense tensors.
inline std::int64_t strides_of(Layout layout, std::int64_t n0, std::int64_t H, std::int64_t T, std::int64_t D,
                               std::int64_t* s) {
    switch (layout) {
    case Layout::bhtd: s[3] = 1, s[2] = D, s[1] = T * D, s[0] = H * T * D; break;
    case Layout::bthd: s[3] = 1, s[1] = D, s[2] = H * D, s[0] = T * H * D; break;
    case Layout::gapped: s[3] = 2, s[1] = 2 * D + 3, s[2] = H * (2 * D + 3) + 1, s[0] = T * s[2] + 5; break;
    }
    return (n0 - 1) * s[0] + (H - 1) * s[1] + (T - 1) * s[2] + (D - 1) * s[3] + 1;
}

// The per-sequence arrays a problem points at: they must outlive it.
struct SequenceArrays {
    std::vector<std::int32_t> q_pos, kv_lens, cu_q, cu_k;
    std::vector<float> alibi_slopes;
};

// The extents of the dense or varlen tensors: q, out [q_n0, Hq, q_T, D], k, v [k_n0, Hk, k_T, D]
// (a paged cache is the caller's), and lse [q_n0, Hq, q_T] in elements.
struct Extents {
    std::int64_t q_n0, q_T, k_n0, k_T;
    std::int64_t lse_elements(int Hq) const { return q_n0 * Hq * q_T; }
};

// Sets everything of p that a Spec says but its tensors and its block table: the scalars, q_len
// and kv_len, positions, ALiBi slopes, varlen's cu_seqlens or dense kv_lens (in `arrays`), and
// lse's strides.
inline Extents set_problem(const Spec& s, SequenceArrays& arrays, attncheck_problem_v2& p) {
    const int B = int(s.keys.size());
    const int max_q = *std::max_element(s.q_rows.begin(), s.q_rows.end());
    const int max_k = std::max(1, *std::max_element(s.keys.begin(), s.keys.end()));
    const int capacity = s.capacity ? s.capacity : max_k;
    p = attncheck::make_problem_v2({.dtype = s.dtype, .batch = B, .q_heads = s.Hq, .kv_heads = s.Hk, .head_dim = s.Dk,
                                    .value_dim = s.Dv, .causal = s.causal != 0, .window_left = s.window_left,
                                    .window_right = s.window_right, .scale = s.scale, .softcap = s.softcap});
    p.q_len = std::max(1, max_q);
    p.kv_len = capacity;
    arrays.q_pos.assign(s.q_pos.begin(), s.q_pos.end());
    p.q_pos = arrays.q_pos.data();
    if (s.alibi) {
        arrays.alibi_slopes.clear();
        for (int h = 0; h < s.Hq; ++h) arrays.alibi_slopes.push_back(0.05f + 0.4f * float(h + 1) / float(s.Hq));
        p.alibi_slopes = arrays.alibi_slopes.data();
    }
    const auto prefix = [](const std::vector<int>& n) {
        std::vector<std::int32_t> cu = {0};
        for (int x : n) cu.push_back(cu.back() + x);
        return cu;
    };
    Extents e{B, p.q_len, B, capacity};
    if (s.mode == Mode::varlen) {
        arrays.cu_q = prefix(s.q_rows), arrays.cu_k = prefix(s.keys);
        p.cu_seqlens_q = arrays.cu_q.data(), p.cu_seqlens_k = arrays.cu_k.data();
        e.q_n0 = 1, e.q_T = std::max(1, arrays.cu_q.back());
        e.k_n0 = 1, e.k_T = std::max(1, arrays.cu_k.back());
    } else if (s.with_kv_lens) {
        arrays.kv_lens.assign(s.keys.begin(), s.keys.end());
        p.kv_lens = arrays.kv_lens.data();
    }
    if (s.lse) {
        p.lse_stride[0] = s.mode == Mode::varlen ? 0 : s.Hq * e.q_T;
        p.lse_stride[1] = s.lse_rows_outer ? 1 : e.q_T, p.lse_stride[2] = s.lse_rows_outer ? s.Hq : 1;
    }
    return e;
}

// Whether some query row of sequence b sees key j.
inline bool key_seen(const attncheck_problem_v2& p, int b, int j) {
    for (int i = 0; i < attncheck::q_len_of(p, b); ++i)
        if (attncheck::visible_v2(p, b, i, j)) return true;
    return false;
}

// Writes every key's k and v through p's tensors, values from `draw()` in the order (b, hk, j,
// then k's columns, then v's), and `hidden` in every key no query row sees (without a draw).
template <class Draw>
void fill_keys(const attncheck_problem_v2& p, float hidden, Draw&& draw) {
    for (int b = 0; b < p.batch; ++b)
        for (int hk = 0; hk < p.kv_heads; ++hk)
            for (int j = 0; j < attncheck::kv_len_of(p, b); ++j) {
                const bool unseen = !key_seen(p, b, j);
                const auto value = [&] { return unseen ? hidden : draw(); };
                for (int c = 0; c < p.head_dim; ++c)
                    attncheck::store_element(p.dtype, p.k.data, attncheck::kv_offset_v2(p, p.k, b, hk, j, c), value());
                for (int c = 0; c < p.value_dim; ++c)
                    attncheck::store_element(p.dtype, p.v.data, attncheck::kv_offset_v2(p, p.v, b, hk, j, c), value());
            }
}

// What random_spec() draws from: a test sizes the lengths to its kernels' blocks, so that long
// sequences cross them.
struct SpecRanges {
    int max_head_dim;                  // Dk in [1, max_head_dim]
    int long_keys_min, long_keys_max;  // a long sequence's keys (a short one has 0 to 30)
    int max_rows;                      // a sequence's query rows when not a decode step
    int max_q_pos;                     // a position drawn at random (else Tk - Tq)
    int max_window_left, max_window_right;
    // A backward's call: grad_layout drawn, dense or varlen (no block table), always lse, NaN
    // padding. Else a forward's: dense, varlen or paged, block size, lse or not, its layout, padding.
    bool backward;
};

// The version 2 zoo's forward kernels (kernels/zoo_v2.cpp): long sequences across their 96-key tiles.
constexpr SpecRanges kForwardRanges = {.max_head_dim = 20, .long_keys_min = 90, .long_keys_max = 200, .max_rows = 40,
                                       .max_q_pos = 220, .max_window_left = 120, .max_window_right = 60, .backward = false};
// The backward zoo (kernels/zoo_backward.cpp): long sequences across its 64-key blocks.
constexpr SpecRanges kBackwardRanges = {.max_head_dim = 16, .long_keys_min = 60, .long_keys_max = 150, .max_rows = 30,
                                        .max_q_pos = 160, .max_window_left = 90, .max_window_right = 40, .backward = true};

// A random call of every feature within `r`: dtype, GQA, layouts, dense (kv_lens) / varlen /
// paged, positions, causal or not, windows, softcap, ALiBi, lse, lengths across the blocks.
inline Spec random_spec(std::uint32_t seed, const SpecRanges& r) {
    std::mt19937 rng(seed);
    const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    Spec s;
    s.seed = seed;
    s.dtype = pick(0, 2);
    s.Hk = pick(1, 2);
    s.Hq = s.Hk * pick(1, 3);
    s.Dk = pick(1, r.max_head_dim);
    s.Dv = pick(0, 1) ? s.Dk : pick(1, 12);
    s.layout = Layout(pick(0, 2));
    if (r.backward) s.grad_layout = Layout(pick(0, 2));
    const int mode = pick(0, 2);  // a backward: one call in three varlen, as a forward
    s.mode = !r.backward ? Mode(mode) : mode == 0 ? Mode::varlen : Mode::dense;
    const bool varlen = s.mode == Mode::varlen;
    const int B = pick(1, 3);
    const bool long_keys = pick(0, 2) == 0;
    const bool decode = pick(0, 2) == 0;
    s.keys.clear(), s.q_rows.clear(), s.q_pos.clear();
    const int dense_q = decode ? 1 : pick(1, r.max_rows);
    for (int b = 0; b < B; ++b) {
        const int keys = long_keys ? pick(r.long_keys_min, r.long_keys_max) : pick(0, 30);
        s.keys.push_back(keys);
        const int rows = varlen ? (decode ? 1 : pick(0, r.max_rows)) : dense_q;
        s.q_rows.push_back(rows);
        s.q_pos.push_back(pick(0, 3) == 0 ? pick(0, r.max_q_pos) : std::max(0, keys - rows));
    }
    s.with_kv_lens = !varlen && pick(0, 1);
    s.capacity = std::max(1, *std::max_element(s.keys.begin(), s.keys.end()) + (s.with_kv_lens ? pick(0, 9) : 0));
    if (!s.with_kv_lens && !varlen) std::fill(s.keys.begin(), s.keys.end(), s.capacity);
    if (!r.backward) s.block_size = pick(1, 40);
    s.causal = pick(0, 1);
    s.window_left = pick(0, 1) ? -1 : pick(0, r.max_window_left);
    s.window_right = s.causal || pick(0, 1) ? -1 : pick(0, r.max_window_right);
    s.scale = std::uniform_real_distribution<float>(0.05f, 1.5f)(rng);
    s.softcap = pick(0, 2) == 0 ? std::uniform_real_distribution<float>(0.5f, 10.0f)(rng) : 0.0f;
    s.alibi = pick(0, 2) == 0;
    if (!r.backward) {
        s.lse = pick(0, 3) != 0;
        s.lse_rows_outer = pick(0, 1);
        s.padding = pick(0, 1) ? kNaN : INFINITY;
    }
    return s;
}

}  // namespace zoo_test
