// tests/reference/v2_case.hpp — a version 2 attention problem with its own storage, for the
// tests of the v2 oracle and of the optimized v2 kernels (forward and backward): a description
// (Spec; SeededSpec adds the seed of random inputs) of the sequences, the layout and the
// features, from which V2Case builds the attncheck_problem_v2 and its buffers.
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
#include <string>
#include <utility>
#include <vector>

#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"

namespace attncheck::test {

// gappy: [B,T,H,D] with columns 2 apart and a gap after every head, row and sequence, so that
// no dense copy stands for the view and every one of its four strides must be honoured.
enum class Layout { bhtd, bthd, gappy };

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
    bool lse_gaps = false;                // lse with a gap after every element and every head
};

// Every field of a spec, as a failure message's label.
inline std::string describe(const Spec& s) {
    std::string d = "dtype=" + std::string(dtype_name(s.dtype)) + " B=" + std::to_string(s.batch) +
                    " Hq=" + std::to_string(s.q_heads) + " Hk=" + std::to_string(s.kv_heads) +
                    " Dk=" + std::to_string(s.head_dim) + " Dv=" + std::to_string(s.value_dim) +
                    " kv_capacity=" + std::to_string(s.kv_capacity) + " kv_lens=" + std::to_string(s.kv_lens) +
                    " layout=" + std::to_string(int(s.layout)) + " row_gap=" + std::to_string(s.row_gap) +
                    " varlen=" + std::to_string(s.varlen) + " block_size=" + std::to_string(s.block_size) +
                    " spare_blocks=" + std::to_string(s.spare_blocks) + " causal=" + std::to_string(s.causal) +
                    " window=(" + std::to_string(s.window_left) + "," + std::to_string(s.window_right) +
                    ") scale=" + std::to_string(s.scale) + " softcap=" + std::to_string(s.softcap) +
                    " alibi=" + std::to_string(!s.alibi.empty()) + " lse=" + std::to_string(s.lse) + " tq/tk/q_pos=";
    for (std::size_t b = 0; b < s.tq.size() && b < s.tk.size() && b < s.q_pos.size(); ++b)
        d += std::to_string(s.tq[b]) + "/" + std::to_string(s.tk[b]) + "/" + std::to_string(s.q_pos[b]) + " ";
    return d;
}

// A spec as the tests of the optimized kernels write it, with the seed and range of its uniform
// random inputs. Their defaults: Dk = Dv = 16, dense keys with kv_lens, three spare blocks in a
// paged cache, lse with gaps; problem() adds the scale 1 / sqrt(Dk).
struct SeededSpec : Spec {
    SeededSpec() {
        head_dim = value_dim = 16;
        kv_lens = true;
        spare_blocks = 3;
        lse_gaps = true;
    }
    float input_scale = 1;  // inputs uniform in [-input_scale, input_scale]
    std::uint64_t seed = 1;

    Spec problem() const {
        Spec s = *this;
        s.scale = float(1.0 / std::sqrt(double(head_dim)));
        return s;
    }
    std::string name() const {
        return describe(*this) + " input_scale=" + std::to_string(input_scale) + " seed=" + std::to_string(seed);
    }
};

// Sequences of tq[b] rows at q_pos[b] over tk[b] keys, of Hq query heads over Hk kv heads.
inline SeededSpec sequences(std::vector<int> tq, std::vector<int> tk, std::vector<int> q_pos, int Hq = 1, int Hk = 1,
                            std::int32_t dtype = ATTNCHECK_DTYPE_F32, std::uint64_t seed = 1) {
    SeededSpec s;
    s.batch = int(tq.size());
    s.tq = std::move(tq), s.tk = std::move(tk), s.q_pos = std::move(q_pos);
    s.q_heads = Hq, s.kv_heads = Hk, s.dtype = dtype, s.seed = seed;
    return s;
}
// `rows` rows at the end of `keys` keys: a prefill (rows = keys), a decode step (one row).
inline SeededSpec rows_over_keys(int rows, int keys, int Hq = 1, int Hk = 1, std::int32_t dtype = ATTNCHECK_DTYPE_F32,
                                 std::uint64_t seed = 1) {
    return sequences({rows}, {keys}, {keys - rows}, Hq, Hk, dtype, seed);
}
inline SeededSpec prefill(int T, int Hq = 1, int Hk = 1, std::int32_t dtype = ATTNCHECK_DTYPE_F32, std::uint64_t seed = 1) {
    return rows_over_keys(T, T, Hq, Hk, dtype, seed);
}
inline SeededSpec decode(int T, int Hq = 1, int Hk = 1, std::int32_t dtype = ATTNCHECK_DTYPE_F32, std::uint64_t seed = 1) {
    return rows_over_keys(1, T, Hq, Hk, dtype, seed);
}

// ALiBi slopes 2^-1, 2^-2, ... 2^-heads: a slope per query head, each exact in every dtype.
inline std::vector<float> halving_alibi_slopes(int heads) {
    std::vector<float> slopes;
    for (int h = 0; h < heads; ++h) slopes.push_back(std::ldexp(1.0f, -(h + 1)));
    return slopes;
}

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
    } else if (layout == Layout::bthd) {
        v.stride[3] = 1, v.stride[1] = w, v.stride[2] = w * heads, v.stride[0] = w * heads * rows;
    } else {
        v.stride[3] = 2, v.stride[1] = 2 * w + 1, v.stride[2] = heads * v.stride[1] + 3;
        v.stride[0] = rows * v.stride[2] + 5;
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
    const void* data() const {
        return dtype == ATTNCHECK_DTYPE_F32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(half.data());
    }
    std::int64_t size() const { return std::int64_t(dtype == ATTNCHECK_DTYPE_F32 ? f32.size() : half.size()); }
    void set(std::int64_t i, float x) { store_element(dtype, data(), i, x); }
    float get(std::int64_t i) const { return load_element(dtype, data(), i); }
    void fill(float x) { resize(dtype, size(), x); }
    // The raw bits of element i (a float16 / bfloat16 pattern in the low half), and of every element.
    std::uint32_t bits_at(std::int64_t i) const {
        return dtype == ATTNCHECK_DTYPE_F32 ? float_to_bits(f32[std::size_t(i)]) : half[std::size_t(i)];
    }
    std::vector<std::uint32_t> bits() const {
        std::vector<std::uint32_t> b(static_cast<std::size_t>(size()));
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = bits_at(std::int64_t(i));
        return b;
    }
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
        }
        if ((s.kv_lens && !s.varlen) || s.block_size > 0) {  // paged: key counts even with packed q
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
        if (s.lse && s.lse_gaps) {
            // lse [B, Hq, Tq] (varlen: [1, Hq, rows]) with a gap after every element and head, guarded.
            p.lse_stride[2] = 2, p.lse_stride[1] = 2 * std::int64_t(q_rows) + 1;
            p.lse_stride[0] = s.q_heads * p.lse_stride[1];
            lse.assign(std::size_t(q_outer * p.lse_stride[0] + 2 * out_guard), kOutSentinel);
            p.lse = lse.data() + out_guard;
        } else if (s.lse) {
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

    // Whether row i of sequence b sees a key, and whether some row of sequence b sees key j.
    bool row_sees(int b, int i) const {
        for (int j = 0; j < kv_len_of(p, b); ++j)
            if (visible_v2(p, b, i, j)) return true;
        return false;
    }
    bool key_seen(int b, int j) const {
        for (int i = 0; i < q_len_of(p, b); ++i)
            if (visible_v2(p, b, i, j)) return true;
        return false;
    }

    // Sets from gen() only what a kernel reads: q of every row (with `only_rows_that_see`, of the
    // rows that see a key), k and v of the keys some row sees. Everything else keeps the padding
    // value, so that a kernel reading it (NaN padding) is caught.
    template <class Gen> void fill_read(Gen&& gen, bool only_rows_that_see = false) {
        for (int b = 0; b < p.batch; ++b) {
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < tq(b); ++i)
                    if (!only_rows_that_see || row_sees(b, i))
                        for (int c = 0; c < p.head_dim; ++c) q.set(q_at(b, h, i, c), gen());
            for (int j = 0; j < tk(b); ++j) {
                if (!key_seen(b, j)) continue;
                for (int hk = 0; hk < p.kv_heads; ++hk) {
                    for (int c = 0; c < p.head_dim; ++c) k.set(k_at(b, hk, j, c), gen());
                    for (int c = 0; c < p.value_dim; ++c) v.set(v_at(b, hk, j, c), gen());
                }
            }
        }
    }

    // Which elements of out and of lse are part of the result: a kernel writes those and no other.
    std::vector<char> out_result() const {
        std::vector<char> mine(std::size_t(out.size()), 0);
        for (int b = 0; b < p.batch; ++b)
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < tq(b); ++i)
                    for (int c = 0; c < p.value_dim; ++c) mine[std::size_t(out_at(b, h, i, c))] = 1;
        return mine;
    }
    std::vector<char> lse_result() const {
        std::vector<char> mine(lse.size(), 0);
        for (int b = 0; b < p.batch && p.lse; ++b)
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < tq(b); ++i) mine[std::size_t(out_guard + lse_offset_v2(p, b, h, i))] = 1;
        return mine;
    }

    // Points t at `buffer` from element `offset` on, with the strides of `like` (a tensor of the
    // same shape: dout like out, dq like q).
    static void bind_like(attncheck_tensor_v2& t, Buffer& buffer, const attncheck_tensor_v2& like, std::int64_t offset) {
        t.data = static_cast<char*>(buffer.data()) + offset * std::int64_t(dtype_size(buffer.dtype));
        for (int d = 0; d < 4; ++d) t.stride[d] = like.stride[d];
    }

private:
    // t views `data` from element `offset` on (out: past its leading guard).
    void bind(attncheck_tensor_v2& t, void* data, const View& v, std::int64_t offset) const {
        t.data = static_cast<char*>(data) + offset * std::int64_t(dtype_size(spec.dtype));
        for (int d = 0; d < 4; ++d) t.stride[d] = v.stride[d];
    }
};

}  // namespace attncheck::test
