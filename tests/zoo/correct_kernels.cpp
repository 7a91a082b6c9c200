// tests/zoo/correct_kernels.cpp — eight correct float32 attention kernels, each evaluating the
// ABI's function in its own order (see correct_kernels.hpp for why they exist).
//
// Written as an outside kernel author would: only the C ABI header, plain loops, no threads (so
// every kernel is deterministic), scratch in std::vector (an allocation failure is reported as
// "unsupported", never thrown across the C boundary). What is shared is the part that is not
// numerics: argument checks, the (b, h, i) loop, the causal/padding mask and empty rows
// (run_rows). What differs is one function per kernel that turns one query row into one output
// row; its first comment line says what makes its float32 evaluation different.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include "tests/zoo/correct_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using Index = std::int64_t;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The ABI's refusals: unknown version, a null pointer, a size below 1, q_offset < 0, a
// kv_valid_len outside [0, Tk], or element counts so large that indexing could wrap.
bool malformed(const attncheck_problem* p, const float* q, const float* k, const float* v, const float* out) {
    if (!p || !q || !k || !v || !out) return true;
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return true;
    for (const std::int32_t n : {p->batch, p->heads, p->q_len, p->kv_len, p->head_dim, p->value_dim})
        if (n < 1) return true;
    if (p->q_offset < 0) return true;
    if (p->kv_valid_len)
        for (std::int32_t b = 0; b < p->batch; ++b)
            if (p->kv_valid_len[b] < 0 || p->kv_valid_len[b] > p->kv_len) return true;
    const double rows = double(p->batch) * p->heads * std::max(p->q_len, p->kv_len);
    return rows * std::max(p->head_dim, p->value_dim) > 0x1p60;
}

// One query row's inputs: its query, the first n keys and values of its (b, h) (the visible
// keys of a row are always a prefix: j < kv_valid_len and, when causal, j <= q_offset + i), and
// its output row.
struct Row {
    const float* q;  // [Dk]
    const float* k;  // [n, Dk]
    const float* v;  // [n, Dv]
    Index n, Dk, Dv;
    float scale;
    float* o;        // [Dv]
    float qk(Index j, Index c) const { return q[c] * k[j * Dk + c]; }
    float val(Index j, Index c) const { return v[j * Dv + c]; }
};

template <class RowFn>
int run_rows(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out, RowFn row) {
    if (malformed(p, q, k, v, out)) return ATTNCHECK_UNSUPPORTED;
    const Index B = p->batch, H = p->heads, Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    try {
        for (Index b = 0; b < B; ++b) {
            const Index valid = p->kv_valid_len ? Index(p->kv_valid_len[b]) : Tk;
            for (Index h = 0; h < H; ++h) {
                const Index bh = b * H + h;
                for (Index i = 0; i < Tq; ++i) {
                    const Index n = p->causal ? std::min(valid, Index(p->q_offset) + i + 1) : valid;
                    float* o = out + (bh * Tq + i) * Dv;
                    if (n <= 0) {
                        std::fill(o, o + Dv, 0.0f);  // no visible key: zeros, never NaN
                        continue;
                    }
                    row(Row{q + (bh * Tq + i) * Dk, k + bh * Tk * Dk, v + bh * Tk * Dv, n, Dk, Dv, p->scale, o});
                }
            }
        }
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
    return ATTNCHECK_OK;
}

// (a) Textbook two-pass softmax with every sum (dot products, denominator, P V) taken from the
// last term to the first.
void reversed_row(const Row& r) {
    std::vector<float> p(std::size_t(r.n));  // [n] scores, then exp(score - max)
    float m = kNegInf;
    for (Index j = 0; j < r.n; ++j) {
        float dot = 0.0f;
        for (Index c = r.Dk; c-- > 0;) dot += r.qk(j, c);
        p[std::size_t(j)] = r.scale * dot;
        m = std::max(m, p[std::size_t(j)]);
    }
    float sum = 0.0f;
    for (Index j = r.n; j-- > 0;) {
        p[std::size_t(j)] = std::exp(p[std::size_t(j)] - m);
        sum += p[std::size_t(j)];
    }
    for (Index c = 0; c < r.Dv; ++c) {
        float acc = 0.0f;
        for (Index j = r.n; j-- > 0;) acc += p[std::size_t(j)] * r.val(j, c);
        r.o[c] = acc / sum;
    }
}

// (b) Blocked: dot products in 8 lane partial sums combined as a tree (what an 8-wide SIMD loop
// computes), denominator and P V summed per 16-key tile and the tiles' sums then added.
constexpr Index kLanes = 8, kKeyTile = 16;
float dot_lanes(const Row& r, Index j) {
    float lane[kLanes] = {};
    for (Index c = 0; c < r.Dk; ++c) lane[c % kLanes] += r.qk(j, c);
    for (Index width = kLanes / 2; width >= 1; width /= 2)
        for (Index l = 0; l < width; ++l) lane[l] += lane[l + width];
    return lane[0];
}
void blocked_row(const Row& r) {
    std::vector<float> p(std::size_t(r.n));  // [n]
    float m = kNegInf;
    for (Index j = 0; j < r.n; ++j) {
        p[std::size_t(j)] = r.scale * dot_lanes(r, j);
        m = std::max(m, p[std::size_t(j)]);
    }
    std::vector<float> acc(std::size_t(r.Dv), 0.0f), tile_acc(std::size_t(r.Dv));  // [Dv]
    float sum = 0.0f;
    for (Index j0 = 0; j0 < r.n; j0 += kKeyTile) {
        const Index j1 = std::min(r.n, j0 + kKeyTile);
        float tile_sum = 0.0f;
        std::fill(tile_acc.begin(), tile_acc.end(), 0.0f);
        for (Index j = j0; j < j1; ++j) {
            const float e = std::exp(p[std::size_t(j)] - m);
            tile_sum += e;
            for (Index c = 0; c < r.Dv; ++c) tile_acc[std::size_t(c)] += e * r.val(j, c);
        }
        sum += tile_sum;
        for (Index c = 0; c < r.Dv; ++c) acc[std::size_t(c)] += tile_acc[std::size_t(c)];
    }
    for (Index c = 0; c < r.Dv; ++c) r.o[c] = acc[std::size_t(c)] / sum;
}

// (c) One-pass online softmax: a running maximum, and the running denominator and output
// rescaled by exp(old max - new max) whenever the maximum grows.
void online_row(const Row& r) {
    std::vector<float> acc(std::size_t(r.Dv), 0.0f);  // [Dv]
    float m = kNegInf, sum = 0.0f;
    for (Index j = 0; j < r.n; ++j) {
        float dot = 0.0f;
        for (Index c = 0; c < r.Dk; ++c) dot += r.qk(j, c);
        const float s = r.scale * dot;
        if (s > m) {
            const float alpha = std::exp(m - s);  // exp(-inf) = 0 on the first key
            sum *= alpha;
            for (float& a : acc) a *= alpha;
            m = s;
        }
        const float e = std::exp(s - m);
        sum += e;
        for (Index c = 0; c < r.Dv; ++c) acc[std::size_t(c)] += e * r.val(j, c);
    }
    for (Index c = 0; c < r.Dv; ++c) r.o[c] = acc[std::size_t(c)] / sum;
}

// (d) Split-KV (flash-decoding): the keys split into 2-4 chunks, each with its own maximum,
// denominator and unnormalised output, merged by rescaling each chunk by exp(its max - the max).
void split_kv_row(const Row& r) {
    const Index chunks = std::min(r.n, Index(2) + r.n % 3);
    const std::size_t nc = static_cast<std::size_t>(chunks);
    std::vector<float> chunk_max(nc), chunk_sum(nc);
    std::vector<float> chunk_acc(std::size_t(chunks * r.Dv), 0.0f);  // [chunks, Dv]
    std::vector<float> s(std::size_t(r.n));                            // [n]
    for (Index ch = 0; ch < chunks; ++ch) {
        const Index j0 = ch * r.n / chunks, j1 = (ch + 1) * r.n / chunks;
        float m = kNegInf;
        for (Index j = j0; j < j1; ++j) {
            float dot = 0.0f;
            for (Index c = 0; c < r.Dk; ++c) dot += r.qk(j, c);
            s[std::size_t(j)] = r.scale * dot;
            m = std::max(m, s[std::size_t(j)]);
        }
        float sum = 0.0f;
        float* acc = chunk_acc.data() + ch * r.Dv;
        for (Index j = j0; j < j1; ++j) {
            const float e = std::exp(s[std::size_t(j)] - m);
            sum += e;
            for (Index c = 0; c < r.Dv; ++c) acc[c] += e * r.val(j, c);
        }
        chunk_max[std::size_t(ch)] = m;
        chunk_sum[std::size_t(ch)] = sum;
    }
    const float m = *std::max_element(chunk_max.begin(), chunk_max.end());
    float sum = 0.0f;
    std::vector<float> weight(nc);
    for (Index ch = 0; ch < chunks; ++ch) {
        weight[std::size_t(ch)] = std::exp(chunk_max[std::size_t(ch)] - m);
        sum += weight[std::size_t(ch)] * chunk_sum[std::size_t(ch)];
    }
    for (Index c = 0; c < r.Dv; ++c) {
        float acc = 0.0f;
        for (Index ch = 0; ch < chunks; ++ch) acc += weight[std::size_t(ch)] * chunk_acc[std::size_t(ch * r.Dv + c)];
        r.o[c] = acc / sum;
    }
}

// The forward-order second half of (e) and (f): p_j = exp_fn(score_j - m) and their sum, both
// in key order, then out = (sum_j p_j v_j) / sum.
template <class Exp>
void softmax_times_values(const Row& r, std::vector<float>& p, float m, Exp exp_fn) {
    float sum = 0.0f;
    for (float& x : p) {
        x = exp_fn(x - m);
        sum += x;
    }
    for (Index c = 0; c < r.Dv; ++c) {
        float acc = 0.0f;
        for (Index j = 0; j < r.n; ++j) acc += p[std::size_t(j)] * r.val(j, c);
        r.o[c] = acc / sum;
    }
}

// (e) The scale folded into q (q' = scale * q rounded to float32) before the dot products, as
// fused kernels do: one more rounding per score.
void prescaled_q_row(const Row& r) {
    std::vector<float> qs(std::size_t(r.Dk));  // [Dk]
    for (Index c = 0; c < r.Dk; ++c) qs[std::size_t(c)] = r.scale * r.q[c];
    std::vector<float> p(std::size_t(r.n));   // [n]
    float m = kNegInf;
    for (Index j = 0; j < r.n; ++j) {
        float dot = 0.0f;
        for (Index c = 0; c < r.Dk; ++c) dot += qs[std::size_t(c)] * r.k[j * r.Dk + c];
        p[std::size_t(j)] = dot;
        m = std::max(m, dot);
    }
    softmax_times_values(r, p, m, [](float x) { return std::exp(x); });
}

// (f) exp2 with log2(e) folded into the scale (scores in base 2, float32 scale * log2 e), as
// FlashAttention and llama.cpp do.
void exp2_row(const Row& r) {
    const float scale_log2e = r.scale * 1.44269504088896340736f;
    std::vector<float> p(std::size_t(r.n));  // [n] scores in log2 units, then 2^(score - max)
    float m = kNegInf;
    for (Index j = 0; j < r.n; ++j) {
        float dot = 0.0f;
        for (Index c = 0; c < r.Dk; ++c) dot += r.qk(j, c);
        p[std::size_t(j)] = dot * scale_log2e;
        m = std::max(m, p[std::size_t(j)]);
    }
    softmax_times_values(r, p, m, [](float x) { return std::exp2(x); });
}

// (g) Everything in float64, rounded to float32 once at the end: the most accurate a float32
// output can be (its error is the final rounding alone).
void float64_row(const Row& r) {
    std::vector<double> p(std::size_t(r.n));  // [n]
    double m = -std::numeric_limits<double>::infinity();
    for (Index j = 0; j < r.n; ++j) {
        double dot = 0.0;
        for (Index c = 0; c < r.Dk; ++c) dot += double(r.q[c]) * double(r.k[j * r.Dk + c]);
        p[std::size_t(j)] = double(r.scale) * dot;
        m = std::max(m, p[std::size_t(j)]);
    }
    double sum = 0.0;
    for (double& x : p) {
        x = std::exp(x - m);
        sum += x;
    }
    for (Index c = 0; c < r.Dv; ++c) {
        double acc = 0.0;
        for (Index j = 0; j < r.n; ++j) acc += p[std::size_t(j)] * double(r.val(j, c));
        r.o[c] = float(acc / sum);
    }
}

// (h) FMA everywhere: dot products by pairwise summation with std::fma at the leaves, P V
// accumulated with std::fma, and the output multiplied by the reciprocal of the denominator.
float dot_fma_pairwise(const Row& r, Index j, Index lo, Index hi) {
    if (hi - lo <= 2) {
        const float second = hi - lo == 2 ? r.qk(j, lo + 1) : 0.0f;
        return std::fma(r.q[lo], r.k[j * r.Dk + lo], second);
    }
    const Index mid = lo + (hi - lo) / 2;
    return dot_fma_pairwise(r, j, lo, mid) + dot_fma_pairwise(r, j, mid, hi);
}
void fma_pairwise_row(const Row& r) {
    std::vector<float> p(std::size_t(r.n));  // [n]
    float m = kNegInf;
    for (Index j = 0; j < r.n; ++j) {
        p[std::size_t(j)] = r.scale * dot_fma_pairwise(r, j, 0, r.Dk);
        m = std::max(m, p[std::size_t(j)]);
    }
    float sum = 0.0f;
    for (float& x : p) {
        x = std::exp(x - m);
        sum += x;
    }
    const float inv_sum = 1.0f / sum;
    for (Index c = 0; c < r.Dv; ++c) {
        float acc = 0.0f;
        for (Index j = 0; j < r.n; ++j) acc = std::fma(p[std::size_t(j)], r.val(j, c), acc);
        r.o[c] = acc * inv_sum;
    }
}

// The ABI entry point of the kernel whose rows `row` computes.
template <void (*row)(const Row&)>
int rows_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    return run_rows(p, q, k, v, out, row);
}

}  // namespace

namespace attncheck::zoo {

const std::vector<CorrectKernel>& correct_kernels() {
    static const std::vector<CorrectKernel> all = {
        {"reversed", rows_kernel<reversed_row>, "two-pass, every sum from the last term to the first"},
        {"blocked", rows_kernel<blocked_row>, "8-lane dot products, 16-key tiles of partial sums"},
        {"online", rows_kernel<online_row>, "one-pass online softmax with rescaling"},
        {"split_kv", rows_kernel<split_kv_row>, "2-4 key chunks merged by log-sum-exp rescaling"},
        {"prescaled_q", rows_kernel<prescaled_q_row>, "scale folded into q before the dot products"},
        {"exp2", rows_kernel<exp2_row>, "exp2 with log2(e) folded into the scale"},
        {"float64", rows_kernel<float64_row>, "float64 throughout, rounded to float32 once"},
        {"fma_pairwise", rows_kernel<fma_pairwise_row>, "FMA pairwise dot products, FMA P V, reciprocal"},
    };
    return all;
}

}  // namespace attncheck::zoo
