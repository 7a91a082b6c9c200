// reference/attention_v2.cpp — the float64 oracle of kernel ABI version 2 (attention_v2.hpp)
// and the reference kernel behind the v2 C ABI.
//
// One row at a time: the row's visible keys (visible_v2), their scores in float64 from the
// stored inputs (scale, softcap, ALiBi, in the ABI's order), the softmax with its maximum
// subtracted, the output and the log-sum-exp; next to each, the bound that any correct
// evaluation with float32 accumulation meets. Every term of the bound is derived in
// docs/numerics.md, "Version 2"; the comments below name them.
//
// Every sum has one fixed order: a dot product over d from 0 up, an output column and each of
// its bound's sums over the row's keys in key order. The loops take 16 keys or 8-32 columns at a
// time in vector lanes, each lane doing exactly the scalar loop's operations in its order, so
// the doubles are the plain loops' whatever the vector width.
//
// Notation: u = 2^-24 (float32, the accumulation); ud = unit_roundoff(dtype) (the inputs' and
// the output's type); n = the row's visible keys; s0_j = scale q.k_j; c_j = the softcapped
// score (c_j = s0_j without softcap); beta_j = the ALiBi bias; s_j = c_j - beta_j the score;
// m = max_j s_j; p_j = exp(s_j - m) / sum_l exp(s_l - m).
#include "reference/attention_v2.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "attncheck/problem_v2.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::reference {

namespace {

constexpr double u = kUnitRoundoff32;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The absolute error a rounding to `dtype` may make on a number too small for the dtype's
// normal range: half the subnormal spacing (float16: 2^-24 / 2; bfloat16 and float32 share
// float32's exponent range, where the float32 underflow term covers flushing too).
double tiny_rounding(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? 0x1p-25 : dtype == ATTNCHECK_DTYPE_BF16 ? kMinNormal32 : 0.0;
}

// One visible key of a row: its index, exact score and the bound on a kernel's score error.
struct ScoredKey {
    int j = 0;
    double s = 0;  // the score s_j
    double e = 0;  // e_j: |kernel's score - s_j| <= e_j, in natural-exponent units
    double p = 0;  // the softmax weight p_j
};

// n elements of a row of a tensor, `stride` apart from element `offset` on, as float64 (exact),
// into row[0], row[to], row[2 to], ... One loop per dtype (load_element() with a constant dtype),
// and the contiguous case apart, a loop the compiler vectorizes.
void load_row(std::int32_t dtype, const void* data, std::int64_t offset, std::int64_t stride, std::size_t n,
              double* row, std::size_t to = 1) {
    const auto run = [&](auto element) {
        if (stride == 1 && to == 1)
            for (std::size_t c = 0; c < n; ++c) row[c] = double(element(offset + std::int64_t(c)));
        else
            for (std::size_t c = 0; c < n; ++c) row[c * to] = double(element(offset + std::int64_t(c) * stride));
    };
    switch (dtype) {
    case ATTNCHECK_DTYPE_F16: return run([data](std::int64_t o) { return load_element(ATTNCHECK_DTYPE_F16, data, o); });
    case ATTNCHECK_DTYPE_BF16: return run([data](std::int64_t o) { return load_element(ATTNCHECK_DTYPE_BF16, data, o); });
    default: return run([data](std::int64_t o) { return load_element(ATTNCHECK_DTYPE_F32, data, o); });
    }
}

}  // namespace

// The score of key j for (b, h, row i) and the bound on its float32 evaluation, up to (not
// including) the exponential's stage, which needs the row's maximum.
//   dot and scale:  e0 = u ((Dk + 4) |scale| sum_d |q_d k_d| + |s0|)
//   softcap:        the tanh argument x = s0 / cap (or s0 (1/cap), or q.k (scale/cap)) errs by
//                   (e0 + 2u (|s0| + e0)) / cap; |tanh'| <= 1 carries it to tanh, a tanh of
//                   k ulps adds t = 2ku relative (of the perturbed argument's tanh), the product
//                   with cap u:  e_c = (1 + u)(1 + t) ex + (t + 2u) |c|,  ex = e0 + 2u (|s0| + e0)
//   ALiBi:          beta = slope (a - j) with a - j exact: the product rounds (u |beta|); in
//                   base 2, log2 e folded into the slope (2u |beta|) and into c (2u |c| <=
//                   2u (|s| + |beta|), the |s| part counted with the exponential's stage); one
//                   spare; the subtraction u |s|:  e_s = (1 + u) e_c + 6u |beta| + u |s|
void KeysValues::load(const attncheck_problem_v2& p, int b_, int hk_) {
    if (b_ == b && hk_ == hk) return;
    b = b_, hk = hk_;
    const std::size_t Tk = std::size_t(kv_len_of(p, b)), Dk = std::size_t(p.head_dim), Dv = std::size_t(p.value_dim);
    head_dim = p.head_dim;
    kt_stride = Tk + std::size_t(kBlock);
    v_stride = (Dv + std::size_t(kColumns) - 1) / std::size_t(kColumns) * std::size_t(kColumns);
    kt.resize(Dk * kt_stride);
    v.resize(Tk * v_stride);
    // The padding (kt's keys past Tk, v's columns past Dv) is zero; the rest is written below.
    for (std::size_t c = 0; c < Dk; ++c) std::fill_n(kt.data() + c * kt_stride + Tk, kBlock, 0.0);
    for (std::size_t j = 0; j < Tk; ++j) {
        load_row(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, int(j), 0), p.k.stride[3], Dk, &kt[j], kt_stride);
        load_row(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, int(j), 0), p.v.stride[3], Dv, &v[j * v_stride]);
        std::fill_n(v.data() + j * v_stride + Dv, v_stride - Dv, 0.0);
    }
    k.clear();
    if (row_major_keys) {
        k.resize(Tk * Dk);
        for (std::size_t j = 0; j < Tk; ++j)
            for (std::size_t c = 0; c < Dk; ++c) k[j * Dk + c] = kt[c * kt_stride + j];
    }
}

void load_query_row(const attncheck_problem_v2& p, int b, int h, int i, std::vector<double>& q) {
    q.resize(std::size_t(p.head_dim));
    load_row(p.dtype, p.q.data, q_offset_v2(p, p.q, b, h, i, 0), p.q.stride[3], q.size(), q.data());
}

namespace {

// Four doubles as one value of GCC's (and Clang's) vector extension: +, * and & act lane by
// lane, each lane's operation the IEEE one of a scalar double (no contraction: -ffp-contract=off),
// so a lane computes exactly what the scalar loop would; the compiler maps it onto the machine's
// vector registers (one AVX register, two SSE ones).
using Double4 = double __attribute__((vector_size(4 * sizeof(double))));
using Bits4 = std::uint64_t __attribute__((vector_size(4 * sizeof(double))));
constexpr int kQuads = KeysValues::kBlock / 4;

// dots() for one block of kBlock keys whose transposed keys start at kt.
template <bool kMagnitudes>
void dot_block(const double* q, int Dk, const double* kt, std::size_t stride, double* dot, double* mag) {
    const Bits4 magnitude_bits = ~Bits4{} >> 1;  // all but the sign bit
    Double4 sd[kQuads] = {}, sm[kQuads] = {};
    for (int d = 0; d < Dk; ++d, kt += stride)
        for (int g = 0; g < kQuads; ++g) {
            Double4 k;
            std::memcpy(&k, kt + 4 * g, sizeof k);
            const Double4 x = q[d] * k;
            sd[g] += x;
            if constexpr (kMagnitudes) sm[g] += (Double4)((Bits4)x & magnitude_bits);  // |x|
        }
    std::memcpy(dot, sd, sizeof sd);
    if constexpr (kMagnitudes) std::memcpy(mag, sm, sizeof sm);
}

}  // namespace

void KeysValues::dots(const double* q, int lo, int n, double* dot, double* mag) const {
    // Whole blocks into a local buffer (the last block's lanes past Tk read kt's zero padding).
    double sd[kBlock], sm[kBlock];
    for (int t = 0; t < n; t += kBlock) {
        const double* col = kt.data() + std::size_t(lo + t);
        if (mag)
            dot_block<true>(q, head_dim, col, kt_stride, sd, sm);
        else
            dot_block<false>(q, head_dim, col, kt_stride, sd, sm);
        const int m = std::min(kBlock, n - t);
        std::copy_n(sd, m, dot + t);
        if (mag) std::copy_n(sm, m, mag + t);
    }
}

namespace {

// The score and its bound from the dot product q.k (summed in d order) and sum_d |q_d k_d|.
// Inlined into score_span()'s loop over a row's keys, where the branches on softcap and ALiBi are
// the same for every key.
[[gnu::always_inline]] inline ScoreV2 score_of_dot(const attncheck_problem_v2& p, double tanh_ulps, int b, int h,
                                                  int i, int j, double dot, double mag) {
    const double scale = double(p.scale);
    ScoreV2 r;
    r.s0 = scale * dot;
    r.s = r.s0;
    double e = u * ((double(p.head_dim) + 4.0) * std::abs(scale) * mag + std::abs(r.s0));
    if (p.softcap > 0) {
        const double cap = double(p.softcap);
        r.s = cap * std::tanh(r.s0 / cap);
        const double t = 2.0 * tanh_ulps * u;
        const double ex = e + 2.0 * u * (std::abs(r.s0) + e);
        e = (1.0 + u) * (1.0 + t) * ex + (t + 2.0 * u) * std::abs(r.s);
    }
    r.e_capped = e;
    if (p.alibi_slopes) {
        const double a = double(p.q_pos[b]) + double(i);
        const double beta = double(p.alibi_slopes[h]) * (a - double(j));
        r.s -= beta;
        e = (1.0 + u) * e + 6.0 * u * std::abs(beta) + u * std::abs(r.s);
    }
    r.e = e;
    return r;
}

}  // namespace

void score_span(const attncheck_problem_v2& p, double tanh_ulps, int b, int h, int i, const double* q,
                const KeysValues& kv, int lo, int n, bool with_bounds, std::vector<ScoreV2>& scores) {
    constexpr int L = KeysValues::kBlock;
    scores.resize(std::size_t(std::max(n, 0)));
    double dot[L], mag[L] = {};
    for (int t0 = 0; t0 < n; t0 += L) {
        const int m = std::min(L, n - t0);
        kv.dots(q, lo + t0, m, dot, with_bounds ? mag : nullptr);
        for (int t = 0; t < m; ++t)
            scores[std::size_t(t0 + t)] = score_of_dot(p, tanh_ulps, b, h, i, lo + t0 + t, dot[t], mag[t]);
    }
}

namespace {

// What attend_row() reuses from row to row.
struct RowScratch {
    std::vector<ScoredKey> keys;  // the row's visible keys (and its sink)
    std::vector<ScoreV2> scores;  // score_span() over the span of the visible keys
};

// The scores and their bounds of the visible keys in `keys` (their j set), taken over the keys'
// span [first j, last j], which is all of it: visible_v2()'s keys are one interval. The
// magnitudes are skipped for values_only (the bounds stay unused).
void score_keys(const attncheck_problem_v2& p, const OracleV2Options& options, int b, int h, int i,
                const double* q, const KeysValues& kv, RowScratch& w) {
    if (w.keys.empty()) return;
    const int lo = w.keys.front().j;
    score_span(p, options.tanh_ulps, b, h, i, q, kv, lo, w.keys.back().j - lo + 1, !options.values_only, w.scores);
    for (ScoredKey& k : w.keys) {
        const ScoreV2& sc = w.scores[std::size_t(k.j - lo)];
        k.s = sc.s;
        k.e = sc.e;
    }
}

// Row (b, h, i) into the oracle's logical row r.
void attend_row(const attncheck_problem_v2& p, const OracleV2Options& options, int b, int h, int i, std::size_t r,
                OracleV2& o, RowScratch& w, const std::vector<double>& q, const KeysValues& kv) {
    constexpr int L = KeysValues::kColumns;
    const std::size_t Dv = std::size_t(p.value_dim);
    std::vector<ScoredKey>& keys = w.keys;
    keys.clear();
    const int Tk = kv_len_of(p, b);
    for (int j = 0; j < Tk; ++j)
        if (visible_v2(p, b, i, j)) keys.push_back({j, 0.0, 0.0, 0.0});
    score_keys(p, options, b, h, i, q.data(), kv, w);
    o.visible[r] = int(keys.size());
    // A sink is one more score, exact as given, with a value of 0 (key index -1): the bound
    // below counts it as a key (its exponential's stage, one more term of each sum).
    if (p.sinks) keys.push_back({-1, double(p.sinks[h]), 0.0, 0.0});
    const std::size_t n = keys.size();
    if (n == 0) {  // the ABI's empty row: out 0 and lse -inf, exactly (bounds 0)
        o.lse[r] = -kInf;
        o.max_score[r] = -kInf;
        return;
    }

    // Softmax with the maximum subtracted. The exponential's stage adds to each score error:
    // a scale or log2 e folded into the exponent (3u |s|, one spare u |s|), the subtraction of
    // the (running) maximum and the maximum's own folded roundings (4u |m|), and an exp or exp2
    // of 2 ulps (4u): e_j += u (4 |s_j| + 4 |m| + 4).
    double m = -kInf;
    for (const ScoredKey& k : keys) m = std::max(m, k.s);
    double z = 0, E = 0;
    for (ScoredKey& k : keys) {
        k.e += u * (4.0 * std::abs(k.s) + 4.0 * std::abs(m) + 4.0);
        E = std::max(E, k.e);
        k.p = std::exp(k.s - m);
        z += k.p;
    }
    double weighted_e = 0;  // sum_j p_j e_j
    for (ScoredKey& k : keys) {
        k.p /= z;
        weighted_e += k.p * k.e;
    }
    o.max_score[r] = m;

    // out = sum_j p_j v_j, each column summed in key order, L columns at a time; the sink's value
    // is 0 and adds nothing (a sum that starts at +0 is never -0).
    double* out_row = o.out.data() + r * Dv;
    for (std::size_t c0 = 0; c0 < Dv; c0 += L) {
        double acc[L] = {};
        for (const ScoredKey& k : keys) {
            if (k.j < 0) continue;
            const double* v_row = kv.value(k.j) + c0;
            for (int l = 0; l < L; ++l) acc[l] += k.p * v_row[l];
        }
        std::copy_n(acc, std::min(std::size_t(L), Dv - c0), out_row + c0);
    }

    // lse = m + log z. Score errors move it by log sum_j p_j e^{delta_j}, within
    // [-E, E] and at most e^E sum_j p_j e_j; the sum z (any order, online rescaling, split-KV
    // merge) errs relatively by u (3n + 8), its log by that over 1 - that (u (3n + 9)); a log or
    // log2 times ln 2 of a few ulps: 6u |log z|; the add of the maximum (in base 2: the maximum
    // times log2 e, the sum times ln 2): 4u (|lse| + |m|); weights flushed under 2^-126 move z
    // (>= 1) by n 2^-126. A kernel that sums the probabilities rounded to the dtype moves z by
    // a relative ud + n tiny(dtype) more, its log by 1.1 times that. A merge of chunks through
    // their float32 lse adds split_merge_lse_term (error_bound.hpp).
    const double nn = double(n);
    const double ud = unit_roundoff(p.dtype);
    const bool narrow = p.dtype != ATTNCHECK_DTYPE_F32;
    const bool p_rounded = options.probabilities_rounded && narrow;
    const double log_z = std::log(z);
    o.lse[r] = m + log_z;
    if (options.values_only) return;  // the bounds below are left empty
    o.lse_bound[r] = std::min(std::exp(E) * weighted_e, E) + u * (3.0 * nn + 9.0) + 6.0 * u * std::abs(log_z) +
                     4.0 * u * (std::abs(o.lse[r]) + std::abs(m)) + split_merge_lse_term(nn, o.lse[r]) + nn * kMinNormal32 +
                     (p_rounded ? 1.1 * (ud + nn * tiny_rounding(p.dtype)) : 0.0);

    // The output, column by column (docs/numerics.md 1.1 and 4.3):
    //   softmax term   first = min(e^{2E} sum_j p_j e_j |v_j - o|, max_j |v_j - o|)
    //   The later roundings act on the kernel's weights p~_j (p~_j <= e^{2E} p_j, summing to 1)
    //   and its output o~ (|o~| <= |o| + first): sum_j p~_j |v_j| <= M = min(e^{2E} sum_j p_j |v_j|,
    //   max_j |v_j|).
    //   arithmetic     u (3n + 8) (M + |o| + first)
    //   a merge of normalised chunks through their lse: split_merge_output (error_bound.hpp),
    //                  of M and of max_j |v_j|
    //   underflow      (n + 2) 2^-126 (max_j |v_j| + 1)
    //   probabilities rounded to the dtype before P V (when declared):
    //                  1.1 ud (M + |o| + first) + n tiny(dtype) max_j |v_j|
    //   the output rounded to the dtype (not float32): ud (|o| + bound) + tiny(dtype)
    const double growth = std::exp(2.0 * E);
    const double arith = u * (3.0 * nn + 8.0);
    const SplitMerge merge = split_merge_output(nn, o.lse[r]);
    // The sums over the keys, each column in key order, kC columns at a time (the sink's value
    // is a row of zeros); std::max(a, b) is a < b ? b : a, lane by lane.
    constexpr std::size_t kC = 8, kG = kC / 4;
    static const double zeros[kC] = {};
    const Bits4 magnitude_bits = ~Bits4{} >> 1;
    for (std::size_t c0 = 0; c0 < Dv; c0 += kC) {
        const std::size_t width = std::min(kC, Dv - c0);
        Double4 o4[kG] = {}, soft4[kG] = {}, mag4[kG] = {}, vmax4[kG] = {}, cap4[kG] = {};
        for (std::size_t l = 0; l < width; ++l) o4[l / 4][l % 4] = out_row[c0 + l];
        for (const ScoredKey& k : keys) {
            const double* v = k.j < 0 ? zeros : kv.value(k.j) + c0;
            const double pe = k.p * k.e;
            for (std::size_t g = 0; g < kG; ++g) {
                Double4 v4;
                std::memcpy(&v4, v + 4 * g, sizeof v4);
                const Double4 abs_v = (Double4)((Bits4)v4 & magnitude_bits);
                const Double4 abs_d = (Double4)((Bits4)(v4 - o4[g]) & magnitude_bits);
                soft4[g] += pe * abs_d;
                mag4[g] += k.p * abs_v;
                vmax4[g] = vmax4[g] < abs_v ? abs_v : vmax4[g];
                cap4[g] = cap4[g] < abs_d ? abs_d : cap4[g];
            }
        }
        for (std::size_t l = 0; l < width; ++l) {
            const std::size_t g = l / 4, lane = l % 4;
            const double out = o4[g][lane], soft = soft4[g][lane], mag = mag4[g][lane], vmax = vmax4[g][lane],
                         cap = cap4[g][lane];
            const double first = (std::isfinite(growth) && growth < 2.0) ? std::min(growth * soft, cap) : cap;
            const double M = std::isfinite(growth) ? std::min(growth * mag, vmax) : vmax;
            const double weighted = M + std::abs(out) + first;
            double bound = first + arith * weighted + merge.magnitude * M + merge.largest * vmax +
                           (nn + 2.0) * kMinNormal32 * (vmax + 1.0);
            if (p_rounded) bound += 1.1 * ud * weighted + nn * tiny_rounding(p.dtype) * vmax;
            if (narrow) bound += ud * (std::abs(out) + bound) + tiny_rounding(p.dtype);
            o.out_bound[r * Dv + c0 + l] = bound;
        }
    }
}

}  // namespace

float round_double_to(std::int32_t dtype, double x) {
    float f = float(x);
    if (dtype == ATTNCHECK_DTYPE_F32 || std::isnan(x) || double(f) == x) return round_to(dtype, f);
    // Round to odd: truncate toward zero and mark the inexactness in the last bit. float keeps
    // more than two bits beyond the dtype's precision, so rounding that to nearest even gives
    // x rounded to nearest even (no double rounding).
    if (std::abs(double(f)) > std::abs(x)) f = std::nextafter(f, 0.0f);
    return round_to(dtype, bits_to_float(float_to_bits(f) | 1u));
}

OracleV2 attention_v2_oracle(const attncheck_problem_v2& p, const OracleV2Options& options) {
    if (const std::string e = problem_v2_error(p); !e.empty())
        throw std::invalid_argument("attention_v2_oracle: malformed problem: " + e);
    OracleV2 o;
    o.value_dim = p.value_dim;
    o.first_row.assign(std::size_t(p.batch) + 1, 0);
    o.q_len.resize(std::size_t(p.batch));
    for (int b = 0; b < p.batch; ++b) {
        o.q_len[std::size_t(b)] = q_len_of(p, b);
        o.first_row[std::size_t(b) + 1] =
            o.first_row[std::size_t(b)] + std::size_t(p.q_heads) * std::size_t(o.q_len[std::size_t(b)]);
    }
    const std::size_t rows = o.rows(), Dv = std::size_t(p.value_dim);
    o.out.assign(rows * Dv, 0.0);
    o.lse.assign(rows, 0.0);
    if (!options.values_only) {
        o.out_bound.assign(rows * Dv, 0.0);
        o.lse_bound.assign(rows, 0.0);
    }
    o.visible.assign(rows, 0);
    o.max_score.assign(rows, 0.0);
    RowScratch scratch;
    std::vector<double> q;
    KeysValues kv;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h) {
            kv.load(p, b, kv_head_of(p, h));
            for (int i = 0; i < o.q_len[std::size_t(b)]; ++i) {
                load_query_row(p, b, h, i, q);
                attend_row(p, options, b, h, i, o.row(b, h, i), o, scratch, q, kv);
            }
        }
    return o;
}

}  // namespace attncheck::reference

extern "C" int attncheck_reference_kernel_v2(const attncheck_problem_v2* p) {
    using namespace attncheck;
    if (!p) return ATTNCHECK_UNSUPPORTED;
    // No exception may cross the C boundary: an allocation that fails is reported as unsupported.
    try {
        if (!problem_v2_error(*p).empty()) return ATTNCHECK_UNSUPPORTED;
        // The whole result first, then out and lse, each element once, at the ABI's offsets.
        reference::OracleV2Options values;
        values.values_only = true;
        const reference::OracleV2 o = reference::attention_v2_oracle(*p, values);
        const std::size_t Dv = std::size_t(p->value_dim);
        for (int b = 0; b < p->batch; ++b)
            for (int h = 0; h < p->q_heads; ++h)
                for (int i = 0; i < o.q_len[std::size_t(b)]; ++i) {
                    const std::size_t r = o.row(b, h, i);
                    for (std::size_t c = 0; c < Dv; ++c)
                        store_element(p->dtype, p->out.data, q_offset_v2(*p, p->out, b, h, i, int(c)),
                                      reference::round_double_to(p->dtype, o.out[r * Dv + c]));
                    if (p->lse)
                        p->lse[lse_offset_v2(*p, b, h, i)] = reference::round_double_to(ATTNCHECK_DTYPE_F32, o.lse[r]);
                }
        return ATTNCHECK_OK;
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}
