// kernels/zoo_v2.cpp — the version 2 mutant zoo: two correct kernels of the whole of
// attncheck/kernel_abi_v2.h (dtypes, strides, GQA, q_pos, varlen, windows, softcap, ALiBi, paged
// cache, lse) and their mutants, each one bug a v2 kernel author really ships.
//
// The two bases have the shapes real kernels have:
//   naive_kernel  one query row at a time, two passes over the row's visible keys (the max, then
//                 the sum and P.V), every key read through its own address;
//   tiled_kernel  FlashAttention's: blocks of query rows against key tiles of 96 keys with an
//                 online softmax (running max and sum per row, rescaled per tile), the tiles that
//                 no row of the block sees skipped, masked keys of a partial tile excluded, a
//                 paged cache read block by block through block_table, and the probabilities
//                 rounded to the dtype for the P.V product (declared: rounds_probabilities=yes).
// Both accumulate in float32, read elements with load_element and write with store_element, read
// no key that no query row of the call sees, and refuse a malformed problem (problem_v2_error).
// They share this file's addressing, masking and scoring, written from the ABI's text; the
// float64 oracle (reference/attention_v2.cpp) is not used here.
//
// A mutant is its base instantiated with one Bug: every deviation is an `if constexpr` at the
// one place a real kernel gets it wrong, so the diff from the base is that line. To add one: a
// Bug value, its `if constexpr`, an entry in zoo_v2_entries() and a targeted test in
// tests/zoo/zoo_v2_test.cpp.
#include "kernels/zoo_v2.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "attncheck/problem_v2.hpp"

namespace attncheck {
namespace {

using Problem = attncheck_problem_v2;
using Tensor = attncheck_tensor_v2;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr std::int64_t kKeyTile = 96;    // keys per tile of tiled_kernel
constexpr std::int64_t kQueryBlock = 16; // query rows per block of tiled_kernel

enum class Bug {
    none,
    gqa_head_modulo,        // kv head h % kv_heads instead of h / (q_heads / kv_heads)
    window_both_sides,      // window_left applied on the right too (non-causal): 2w+1 keys
    window_off_by_one,      // left edge j > a - w: w keys instead of w + 1
    window_top_left,        // causal/window mask at row index i instead of q_pos[b] + i
    causal_from_capacity,   // mask position kv_len - Tq(b) + i: depends on the cache capacity
    padding_times_zero,     // last tile loaded to its end, padding keys' weights multiplied by 0
    paged_capacity_keys,    // paged: a sequence's key count taken as kv_len, not kv_lens[b]
    tile_tail_dropped,      // the partial tile after full ones is dropped (Tk = 97)
    f16_exp_unshifted,      // f16: exp(s) without the max subtraction, kept in f16
    softcap_after_mask,     // masked scores set to -inf, then softcapped to -cap
    softcap_before_scale,   // cap * tanh(q.k / cap), then times scale
    lse_log2,               // lse in log2 units
    empty_row_lse_zero,     // an empty row's lse written as 0 instead of -inf
    alibi_sign_flipped,     // bias + m_h (a - j)
    alibi_row_relative,     // ALiBi distance from the row index i, not the position q_pos[b] + i
    k_rows_contiguous,      // k's row stride taken as head_dim, ignoring k.stride[2]
    varlen_k_from_q,        // varlen: k/v rows packed by cu_seqlens_q
    bf16_read_as_f16,       // bf16 keys and values decoded as float16
    window_right_ignored,   // non-causal: window_right dropped (left windows only)
    table_stride_from_capacity,  // block_table rows ceil(kv_len / block_size) apart
    lse_contiguous,         // lse written as a contiguous [B, Hq, Tq], lse_stride ignored
    block_row_pow2_mask,    // paged: key j's row in its block as j & (block_size - 1)
    sink_ignored,           // sinks declared, and left out of the softmax
    sink_not_in_lse,        // the sink in out's denominator, not in lse
    sink_of_kv_head,        // GQA: sinks[h / (Hq / Hk)] (the kv head's index) instead of sinks[h]
};

// ---- reading a problem ------------------------------------------------------------------------

template <Bug bug>
float load(const Problem& p, const void* data, std::int64_t offset) {
    if constexpr (bug == Bug::bf16_read_as_f16)
        if (p.dtype == ATTNCHECK_DTYPE_BF16) return load_element(ATTNCHECK_DTYPE_F16, data, offset);
    return load_element(p.dtype, data, offset);
}

std::int64_t query_rows_of(const Problem& p, int b) {
    return p.cu_seqlens_q ? std::int64_t(p.cu_seqlens_q[b + 1]) - p.cu_seqlens_q[b] : p.q_len;
}

template <Bug bug>
std::int64_t keys_of(const Problem& p, int b) {
    if (p.cu_seqlens_k) {
        if constexpr (bug == Bug::varlen_k_from_q) return query_rows_of(p, b);
        return std::int64_t(p.cu_seqlens_k[b + 1]) - p.cu_seqlens_k[b];
    }
    if constexpr (bug == Bug::paged_capacity_keys)
        if (p.block_table) return p.kv_len;
    return p.kv_lens ? p.kv_lens[b] : p.kv_len;
}

// Rows of k/v that sequence b has in memory: its keys and the padding after them (the dense
// capacity, the rest of its last block, or its packed rows).
template <Bug bug>
std::int64_t rows_in_memory(const Problem& p, int b) {
    const std::int64_t keys = keys_of<bug>(p, b);
    if (p.block_table) return (keys + p.block_size - 1) / p.block_size * p.block_size;
    if (p.cu_seqlens_k) return keys;
    return p.kv_len;
}

template <Bug bug>
int kv_head_of_query_head(const Problem& p, int h) {
    if constexpr (bug == Bug::gqa_head_modulo) return h % p.kv_heads;
    return h / (p.q_heads / p.kv_heads);
}

// Offset of element (row i, column 0) of sequence b, head h in q, out (their rows are packed by
// cu_seqlens_q in a varlen call).
std::int64_t query_row_offset(const Problem& p, const Tensor& t, int b, int h, std::int64_t i) {
    if (p.cu_seqlens_q) return h * t.stride[1] + (p.cu_seqlens_q[b] + i) * t.stride[2];
    return b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
}
template <Bug bug>
std::int64_t lse_offset(const Problem& p, int b, int h, std::int64_t i) {
    if constexpr (bug == Bug::lse_contiguous) {
        if (p.cu_seqlens_q) return std::int64_t(h) * p.cu_seqlens_q[p.batch] + p.cu_seqlens_q[b] + i;
        return (std::int64_t(b) * p.q_heads + h) * p.q_len + i;
    }
    if (p.cu_seqlens_q) return h * p.lse_stride[1] + (p.cu_seqlens_q[b] + i) * p.lse_stride[2];
    return b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2];
}

// Elements from one key row to the next in k or v.
template <Bug bug>
std::int64_t key_row_stride(const Problem& p, const Tensor& t) {
    if constexpr (bug == Bug::k_rows_contiguous)
        if (&t == &p.k) return p.head_dim;
    return t.stride[2];
}

// Offset of (key j, column 0) of kv head hk of sequence b in k or v; key_row_stride() on from
// there up to the end of j's block (paged) or of the sequence.
template <Bug bug>
std::int64_t key_row_offset(const Problem& p, const Tensor& t, int b, int hk, std::int64_t j) {
    const std::int64_t row_stride = key_row_stride<bug>(p, t);
    if (p.block_table) {
        std::int64_t table_stride = p.block_table_stride;
        if constexpr (bug == Bug::table_stride_from_capacity)
            table_stride = (p.kv_len + p.block_size - 1) / p.block_size;
        const std::int64_t block = p.block_table[b * table_stride + j / p.block_size];
        std::int64_t row = j % p.block_size;
        if constexpr (bug == Bug::block_row_pow2_mask) row = j & (p.block_size - 1);
        return block * t.stride[0] + hk * t.stride[1] + row * row_stride;
    }
    if (p.cu_seqlens_k) {
        const std::int64_t first = bug == Bug::varlen_k_from_q ? p.cu_seqlens_q[b] : p.cu_seqlens_k[b];
        return hk * t.stride[1] + (first + j) * row_stride;
    }
    return b * t.stride[0] + hk * t.stride[1] + j * row_stride;
}

// ---- masking and scoring ----------------------------------------------------------------------

// The keys [lo, hi] visible to one query row (empty when lo > hi), and its position for ALiBi.
struct RowKeys {
    std::int64_t lo, hi;
    std::int64_t bias_position;
    bool empty() const { return lo > hi; }
};

template <Bug bug>
RowKeys row_keys(const Problem& p, int b, std::int64_t i, std::int64_t keys) {
    const std::int64_t position = std::int64_t(p.q_pos[b]) + i;
    std::int64_t a = position;  // the position the mask is aligned to
    if constexpr (bug == Bug::window_top_left) a = i;
    if constexpr (bug == Bug::causal_from_capacity) a = std::int64_t(p.kv_len) - query_rows_of(p, b) + i;
    RowKeys r{0, keys - 1, position};
    if constexpr (bug == Bug::alibi_row_relative) r.bias_position = i;
    if (p.causal) r.hi = std::min(r.hi, a);
    if (p.window_left >= 0) {
        r.lo = std::max(r.lo, a - p.window_left);
        if constexpr (bug == Bug::window_off_by_one) r.lo = std::max(r.lo, a - p.window_left + 1);
    }
    if constexpr (bug == Bug::window_both_sides) {
        if (!p.causal && p.window_left >= 0) r.hi = std::min(r.hi, a + p.window_left);
    } else if constexpr (bug != Bug::window_right_ignored) {
        if (!p.causal && p.window_right >= 0) r.hi = std::min(r.hi, a + p.window_right);
    }
    return r;
}

// A score before its bias: the dot product q.k scaled, then softcapped.
template <Bug bug>
float capped(const Problem& p, float dot) {
    if constexpr (bug == Bug::softcap_before_scale) {
        if (p.softcap > 0) return p.scale * (p.softcap * std::tanh(dot / p.softcap));
        return p.scale * dot;
    }
    const float s = p.scale * dot;
    if constexpr (bug == Bug::softcap_after_mask) return s;  // capped after the mask, by the caller
    return p.softcap > 0 ? p.softcap * std::tanh(s / p.softcap) : s;
}

// s with the ALiBi bias of a query row at bias_position and key j.
template <Bug bug>
float biased(const Problem& p, float s, int h, std::int64_t bias_position, std::int64_t j) {
    if (!p.alibi_slopes) return s;
    const float bias = p.alibi_slopes[h] * float(bias_position - j);
    if constexpr (bug == Bug::alibi_sign_flipped) return s + bias;
    return s - bias;
}

// The score of a query row (at bias_position) and key j from their dot product q.k: scaled,
// softcapped, biased.
template <Bug bug>
float score(const Problem& p, float dot, int h, std::int64_t bias_position, std::int64_t j) {
    return biased<bug>(p, capped<bug>(p, dot), h, bias_position, j);
}

// A finished row: out = acc / sum (zeros for an empty row), lse = max + log(sum) (-inf empty).
// A sink joins here, as one more score without a value: the row's (max, sum) rescaled to the
// larger of max and the sink, plus exp(sink - that) (an empty row: out 0, lse = the sink).
template <Bug bug>
void write_row(const Problem& p, int b, int h, std::int64_t i, const float* acc, float max, float sum) {
    float scale = 1.0f;  // what acc is multiplied by with the sink in the denominator
    const float lse_sum = sum, lse_max = max;  // the denominator lse reads (without the sink: a bug)
    if (p.sinks && bug != Bug::sink_ignored) {
        float sink = p.sinks[h];
        if constexpr (bug == Bug::sink_of_kv_head) sink = p.sinks[h / (p.q_heads / p.kv_heads)];
        const float m = std::max(max, sink);
        scale = sum == 0.0f ? 0.0f : std::exp(max - m);
        sum = sum * scale + std::exp(sink - m);
        max = m;
    }
    const bool empty = sum == 0.0f;
    const std::int64_t o = query_row_offset(p, p.out, b, h, i);
    for (std::int64_t c = 0; c < p.value_dim; ++c)
        store_element(p.dtype, p.out.data, o + c * p.out.stride[3], empty ? 0.0f : acc[c] * scale / sum);
    if (!p.lse) return;
    float lse = empty ? kNegInf : max + std::log(sum);
    if constexpr (bug == Bug::sink_not_in_lse) lse = lse_sum == 0.0f ? kNegInf : lse_max + std::log(lse_sum);
    if constexpr (bug == Bug::lse_log2)
        if (!empty) lse *= std::numbers::log2e_v<float>;
    if constexpr (bug == Bug::empty_row_lse_zero)
        if (empty) lse = 0.0f;
    p.lse[lse_offset<bug>(p, b, h, i)] = lse;
}

void load_query_row(const Problem& p, int b, int h, std::int64_t i, float* row) {
    const std::int64_t o = query_row_offset(p, p.q, b, h, i);
    for (std::int64_t c = 0; c < p.head_dim; ++c) row[c] = load_element(p.dtype, p.q.data, o + c * p.q.stride[3]);
}

// ---- the two correct kernels (and, instantiated with a Bug, the mutants) ----------------------

template <Bug bug>
int naive_kernel(const Problem* pp) {
    if (!pp || !problem_v2_error(*pp).empty()) return ATTNCHECK_UNSUPPORTED;
    const Problem& p = *pp;
    const std::int64_t Dk = p.head_dim, Dv = p.value_dim;
    std::vector<float> q(static_cast<std::size_t>(Dk)), acc(static_cast<std::size_t>(Dv));
    // q.k of key j through its own address (the block table read for every key).
    const auto dot = [&](int b, int hk, std::int64_t j) {
        const std::int64_t o = key_row_offset<bug>(p, p.k, b, hk, j);
        float d = 0.0f;
        for (std::int64_t c = 0; c < Dk; ++c) d += q[c] * load<bug>(p, p.k.data, o + c * p.k.stride[3]);
        return d;
    };
    for (int b = 0; b < p.batch; ++b) {
        const std::int64_t Tq = query_rows_of(p, b), Tk = keys_of<bug>(p, b);
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = kv_head_of_query_head<bug>(p, h);
            for (std::int64_t i = 0; i < Tq; ++i) {
                const RowKeys r = row_keys<bug>(p, b, i, Tk);
                std::fill(acc.begin(), acc.end(), 0.0f);
                if (r.empty()) {
                    write_row<bug>(p, b, h, i, acc.data(), kNegInf, 0.0f);
                    continue;
                }
                load_query_row(p, b, h, i, q.data());
                float max = kNegInf;
                for (std::int64_t j = r.lo; j <= r.hi; ++j)
                    max = std::max(max, score<bug>(p, dot(b, hk, j), h, r.bias_position, j));
                bool unshifted = false;  // exp(s) kept in f16, no max subtracted
                if constexpr (bug == Bug::f16_exp_unshifted) unshifted = p.dtype == ATTNCHECK_DTYPE_F16;
                float sum = 0.0f;
                for (std::int64_t j = r.lo; j <= r.hi; ++j) {
                    const float s = score<bug>(p, dot(b, hk, j), h, r.bias_position, j);
                    const float w = unshifted ? round_to(ATTNCHECK_DTYPE_F16, std::exp(s)) : std::exp(s - max);
                    sum += w;
                    const std::int64_t o = key_row_offset<bug>(p, p.v, b, hk, j);
                    for (std::int64_t c = 0; c < Dv; ++c) acc[c] += w * load<bug>(p, p.v.data, o + c * p.v.stride[3]);
                }
                write_row<bug>(p, b, h, i, acc.data(), unshifted ? 0.0f : max, sum);
            }
        }
    }
    return ATTNCHECK_OK;
}

// Loads key rows [j0, j1) of tensor t (kv head hk, sequence b) as float32 rows of `width` into
// rows, reading the block table once per block.
template <Bug bug>
void load_key_rows(const Problem& p, const Tensor& t, int b, int hk, std::int64_t j0, std::int64_t j1,
                   std::int64_t width, float* rows) {
    const std::int64_t row_stride = key_row_stride<bug>(p, t);
    for (std::int64_t j = j0; j < j1;) {
        const std::int64_t run_end = p.block_table ? std::min(j1, (j / p.block_size + 1) * p.block_size) : j1;
        std::int64_t o = key_row_offset<bug>(p, t, b, hk, j);
        for (; j < run_end; ++j, o += row_stride, rows += width)
            for (std::int64_t c = 0; c < width; ++c) rows[c] = load<bug>(p, t.data, o + c * t.stride[3]);
    }
}

template <Bug bug>
int tiled_kernel(const Problem* pp) {
    if (!pp || !problem_v2_error(*pp).empty()) return ATTNCHECK_UNSUPPORTED;
    const Problem& p = *pp;
    const std::int64_t Dk = p.head_dim, Dv = p.value_dim, R = kQueryBlock, T = kKeyTile;
    const auto size = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    std::vector<float> q(size(R * Dk)), acc(size(R * Dv)), max(size(R)), sum(size(R));
    std::vector<float> k_tile(size(T * Dk)), v_tile(size(T * Dv)), s(size(T));
    std::vector<RowKeys> keys(size(R));
    for (int b = 0; b < p.batch; ++b) {
        const std::int64_t Tq = query_rows_of(p, b), Tk = keys_of<bug>(p, b);
        // The last key a tile may cover: the partial tile after full ones is dropped by the bug.
        std::int64_t last_key = Tk - 1;
        if constexpr (bug == Bug::tile_tail_dropped)
            if (Tk > T) last_key = Tk / T * T - 1;
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = kv_head_of_query_head<bug>(p, h);
            for (std::int64_t i0 = 0; i0 < Tq; i0 += R) {
                const std::int64_t rows = std::min(R, Tq - i0);
                // The keys some row of the block sees: [lo, hi] (the rows' ranges slide with i).
                std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = -1;
                for (std::int64_t r = 0; r < rows; ++r) {
                    keys[size(r)] = row_keys<bug>(p, b, i0 + r, Tk);
                    keys[size(r)].hi = std::min(keys[size(r)].hi, last_key);
                    if (keys[size(r)].empty()) continue;
                    lo = std::min(lo, keys[size(r)].lo);
                    hi = std::max(hi, keys[size(r)].hi);
                    load_query_row(p, b, h, i0 + r, &q[size(r * Dk)]);
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                std::fill(max.begin(), max.end(), kNegInf);
                std::fill(sum.begin(), sum.end(), 0.0f);
                for (std::int64_t t0 = lo <= hi ? lo / T * T : 0; t0 <= hi; t0 += T) {
                    const std::int64_t j0 = std::max(t0, lo), j1 = std::min(t0 + T, hi + 1);
                    // Keys loaded past j1: padding up to the tile's end (the bug), masked by a
                    // multiply by 0.
                    std::int64_t loaded_end = j1;
                    if constexpr (bug == Bug::padding_times_zero)
                        if (j1 == Tk) loaded_end = std::min(t0 + T, rows_in_memory<bug>(p, b));
                    load_key_rows<bug>(p, p.k, b, hk, j0, loaded_end, Dk, k_tile.data());
                    load_key_rows<bug>(p, p.v, b, hk, j0, loaded_end, Dv, v_tile.data());
                    for (std::int64_t r = 0; r < rows; ++r) {
                        const RowKeys& rk = keys[size(r)];
                        const std::int64_t a0 = std::max(j0, rk.lo), a1 = std::min(j1, rk.hi + 1);
                        if (a0 >= a1) continue;  // no key of this tile is visible to the row
                        // The keys the row scores in this tile: its visible ones [a0, a1), or
                        // with softcap_after_mask every loaded one (the masked at -inf first).
                        std::int64_t s0 = a0, s1 = a1;
                        if constexpr (bug == Bug::softcap_after_mask) s0 = j0, s1 = j1;
                        const float* qr = &q[size(r * Dk)];
                        float tile_max = kNegInf;
                        for (std::int64_t j = s0; j < s1; ++j) {
                            const float* kr = &k_tile[size((j - j0) * Dk)];
                            float d = 0.0f;
                            for (std::int64_t c = 0; c < Dk; ++c) d += qr[c] * kr[c];
                            float& sj = s[size(j - j0)];
                            if constexpr (bug == Bug::softcap_after_mask) {
                                float masked = j < a0 || j >= a1 ? kNegInf : capped<bug>(p, d);
                                if (p.softcap > 0) masked = p.softcap * std::tanh(masked / p.softcap);
                                sj = biased<bug>(p, masked, h, rk.bias_position, j);
                            } else {
                                sj = score<bug>(p, d, h, rk.bias_position, j);
                            }
                            tile_max = std::max(tile_max, sj);
                        }
                        const float new_max = std::max(max[size(r)], tile_max);
                        const float rescale = std::exp(max[size(r)] - new_max);  // 0 on the first tile
                        float* ar = &acc[size(r * Dv)];
                        for (std::int64_t c = 0; c < Dv; ++c) ar[c] *= rescale;
                        float tile_sum = 0.0f;
                        for (std::int64_t j = s0; j < s1; ++j) {
                            const float w = std::exp(s[size(j - j0)] - new_max);
                            tile_sum += w;
                            // P in the dtype for the P.V product, as FlashAttention's f16 / bf16
                            // kernels do; the sum keeps the float32 weights.
                            const float w_dtype = round_to(p.dtype, w);
                            const float* vr = &v_tile[size((j - j0) * Dv)];
                            for (std::int64_t c = 0; c < Dv; ++c) ar[c] += w_dtype * vr[c];
                        }
                        for (std::int64_t j = j1; j < loaded_end; ++j) {  // only with padding_times_zero
                            const float* kr = &k_tile[size((j - j0) * Dk)];
                            float d = 0.0f;
                            for (std::int64_t c = 0; c < Dk; ++c) d += qr[c] * kr[c];
                            const float w = std::exp(score<bug>(p, d, h, rk.bias_position, j) - new_max) * 0.0f;
                            tile_sum += w;
                            const float* vr = &v_tile[size((j - j0) * Dv)];
                            for (std::int64_t c = 0; c < Dv; ++c) ar[c] += w * vr[c];
                        }
                        sum[size(r)] = sum[size(r)] * rescale + tile_sum;
                        max[size(r)] = new_max;
                    }
                }
                for (std::int64_t r = 0; r < rows; ++r)
                    write_row<bug>(p, b, h, i0 + r, &acc[size(r * Dv)], max[size(r)], sum[size(r)]);
            }
        }
    }
    return ATTNCHECK_OK;
}

// What the bases declare (attncheck/declaration.hpp); a mutant declares what its base does.
constexpr const char* kNaiveDeclaration = "sinks=yes";
constexpr const char* kTiledDeclaration = "rounds_probabilities=yes; sinks=yes";

KernelEntry base(std::string name, attncheck_kernel_v2_fn fn, std::string description, std::string declaration) {
    return {.name = std::move(name), .fn = nullptr, .description = std::move(description),
            .role = KernelRole::zoo_base, .declaration = std::move(declaration), .bug = "",
            .reads_only_visible_keys = false, .fn_v2 = fn};
}

// A mutant's registry entry: `base` with one bug; `reads_out_of_bounds` / `writes_out_of_bounds`:
// on some problems it reads outside k, v or block_table / writes outside lse (run it only in an
// isolated worker, or with its buffers against guard pages).
KernelEntry mutant(std::string name, const char* base, attncheck_kernel_v2_fn fn, std::string bug,
                   bool reads_out_of_bounds = false, bool writes_out_of_bounds = false) {
    const bool tiled = std::string(base) == "v2_tiled";
    return {.name = std::move(name), .fn = nullptr, .description = std::string(base) + " with one bug",
            .role = KernelRole::mutant, .declaration = tiled ? kTiledDeclaration : kNaiveDeclaration,
            .writes_out_of_bounds = writes_out_of_bounds,
            .bug = std::move(bug), .reads_only_visible_keys = false, .fn_v2 = fn,
            .reads_out_of_bounds = reads_out_of_bounds};
}

}  // namespace

std::vector<KernelEntry> zoo_v2_entries() {
    // Neither base makes the v1 decoder's reads_only_visible_keys promise (that flag is about
    // v1's whole-cache call); both read only keys some query row of the call sees.
    return {
        base("v2_naive", naive_kernel<Bug::none>,
             "correct v2 kernel: per query row two passes over its visible keys (max, then sum and P.V), float32",
             kNaiveDeclaration),
        base("v2_tiled", tiled_kernel<Bug::none>,
             "correct v2 kernel: FlashAttention-style online softmax, 16-row query blocks against 96-key tiles, "
             "unseen tiles skipped, paged cache read block by block, float32 (P rounded to the dtype for P.V)",
             kTiledDeclaration),
        mutant("v2_gqa_head_modulo", "v2_tiled", tiled_kernel<Bug::gqa_head_modulo>,
               "GQA maps query head h to kv head h % kv_heads instead of h / (q_heads / kv_heads) "
               "(right only for MHA and MQA)"),
        mutant("v2_window_both_sides", "v2_tiled", tiled_kernel<Bug::window_both_sides>,
               "window_left applied on both sides of a non-causal row (2w+1 keys), window_right ignored"),
        mutant("v2_window_off_by_one", "v2_tiled", tiled_kernel<Bug::window_off_by_one>,
               "sliding window keeps keys j > a - w: w keys instead of w + 1 with the diagonal"),
        mutant("v2_window_top_left", "v2_tiled", tiled_kernel<Bug::window_top_left>,
               "causal and window masks aligned top-left: row i masked at position i, q_pos ignored"),
        mutant("v2_causal_from_capacity", "v2_tiled", tiled_kernel<Bug::causal_from_capacity>,
               "causal/window position taken as kv_len - Tq + i instead of q_pos[b] + i: "
               "the result depends on the cache capacity"),
        mutant("v2_padding_times_zero", "v2_tiled", tiled_kernel<Bug::padding_times_zero>,
               "the last key tile is loaded to its end and the padding keys' weights multiplied by 0 "
               "instead of skipped: NaN/Inf in K/V padding leaks"),
        mutant("v2_paged_capacity_keys", "v2_tiled", tiled_kernel<Bug::paged_capacity_keys>,
               "paged cache: a sequence's key count taken as kv_len (the capacity) instead of kv_lens[b], "
               "reading block_table past its keys",
               /*reads_out_of_bounds=*/true),
        mutant("v2_tile_tail_dropped", "v2_tiled", tiled_kernel<Bug::tile_tail_dropped>,
               "the partial 96-key tile after full ones is dropped: kv_len 97 decode loses key 96, "
               "prefill and decode disagree"),
        mutant("v2_f16_exp_unshifted", "v2_naive", naive_kernel<Bug::f16_exp_unshifted>,
               "float16: exp(s) without the max subtraction, kept in float16 (a score above ~11 overflows to inf)"),
        mutant("v2_softcap_after_mask", "v2_tiled", tiled_kernel<Bug::softcap_after_mask>,
               "softcap applied after the mask: a masked key's -inf becomes -cap, so masked keys of a tile get weight"),
        mutant("v2_softcap_before_scale", "v2_naive", naive_kernel<Bug::softcap_before_scale>,
               "softcap applied before the scale: scale * cap * tanh(q.k / cap)"),
        mutant("v2_lse_log2", "v2_tiled", tiled_kernel<Bug::lse_log2>,
               "log-sum-exp written in log2 units instead of the natural log"),
        mutant("v2_empty_row_lse_zero", "v2_tiled", tiled_kernel<Bug::empty_row_lse_zero>,
               "a row with no visible key gets lse 0 instead of -inf"),
        mutant("v2_alibi_sign_flipped", "v2_naive", naive_kernel<Bug::alibi_sign_flipped>,
               "ALiBi bias added with the wrong sign: + m_h (a - j)"),
        mutant("v2_alibi_row_relative", "v2_tiled", tiled_kernel<Bug::alibi_row_relative>,
               "ALiBi distance from the row index i instead of the absolute position q_pos[b] + i"),
        mutant("v2_k_rows_contiguous", "v2_naive", naive_kernel<Bug::k_rows_contiguous>,
               "assumes contiguous key rows: steps head_dim elements from one k row to the next, ignoring k.stride[2]",
               /*reads_out_of_bounds=*/true),
        mutant("v2_varlen_k_from_q", "v2_tiled", tiled_kernel<Bug::varlen_k_from_q>,
               "varlen: k and v rows located and counted with cu_seqlens_q instead of cu_seqlens_k",
               /*reads_out_of_bounds=*/true),
        mutant("v2_bf16_read_as_f16", "v2_naive", naive_kernel<Bug::bf16_read_as_f16>,
               "bfloat16 keys and values decoded as float16 bit patterns"),
        mutant("v2_window_right_ignored", "v2_naive", naive_kernel<Bug::window_right_ignored>,
               "non-causal window_right ignored (only left windows honoured): a row sees every key to its right"),
        mutant("v2_table_stride_from_capacity", "v2_tiled", tiled_kernel<Bug::table_stride_from_capacity>,
               "paged cache: block_table rows taken as ceil(kv_len / block_size) entries apart instead of "
               "block_table_stride",
               /*reads_out_of_bounds=*/true),
        mutant("v2_lse_contiguous", "v2_tiled", tiled_kernel<Bug::lse_contiguous>,
               "lse written as a contiguous [B, Hq, Tq] (varlen: [Hq, total rows]), lse_stride ignored",
               /*reads_out_of_bounds=*/false, /*writes_out_of_bounds=*/true),
        mutant("v2_block_row_pow2_mask", "v2_naive", naive_kernel<Bug::block_row_pow2_mask>,
               "paged cache: a key's row in its block found as j & (block_size - 1), right only for "
               "block sizes that are powers of two"),
        mutant("v2_sink_ignored", "v2_naive", naive_kernel<Bug::sink_ignored>,
               "attention sinks declared (sinks=yes) and left out of the softmax: rows sum to 1"),
        mutant("v2_sink_not_in_lse", "v2_tiled", tiled_kernel<Bug::sink_not_in_lse>,
               "the sink in out's denominator but not in lse (a backward that recomputes P from it is wrong)"),
        mutant("v2_sink_of_kv_head", "v2_naive", naive_kernel<Bug::sink_of_kv_head>,
               "GQA: the sink of query head h read as sinks[h / (Hq / Hk)], the kv head's index"),
    };
}

}  // namespace attncheck
