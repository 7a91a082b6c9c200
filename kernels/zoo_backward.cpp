// kernels/zoo_backward.cpp — the backward pass's mutant zoo: one correct backward of the whole of
// attncheck/kernel_abi_v2.h (attncheck_grads_v2: dtypes, strides, GQA, q_pos, dense with kv_lens
// and varlen, windows, softcap, ALiBi) and its mutants, each one bug a backward kernel's author
// really ships.
//
// The base, naive_backward, is FlashAttention-2's backward written one query row at a time: the
// probabilities recomputed from the forward's lse (P = exp(s - lse)), D = dout . out from the
// forward's out, then for each key the row sees dP = dout . v, dS = P (dP - D) (times the softcap's
// derivative), dq accumulated per row, dk and dv accumulated in a float32 scratch over every row
// and every query head of a GQA group, then written once, padding rows and keys no row sees as 0.
// The keys are walked in blocks of kKeyBlock as a tiled kernel does (dq carried across blocks).
// It accumulates in float32, reads and writes elements with load_element / store_element, reads
// no key or value that no query row sees (they may hold NaN), and refuses a malformed call and a
// block table (grads_v2_error). Its forward, and every mutant's, is the float64 reference kernel:
// the bugs are in the backward only.
//
// A mutant is the base instantiated with one Bug: every deviation is an `if constexpr` at the one
// place a real kernel gets it wrong, so the diff from the base is that line. To add one: a Bug
// value, its `if constexpr`, an entry in zoo_backward_entries() and a case in
// tests/zoo/zoo_backward_mutants_test.cpp on which it is wrong by far more than float32 rounding. A bug
// that only moves the last bits (a bf16 gradient truncated instead of rounded) does not belong
// here: no sound float32 error bound can tell it from a correct kernel.
//
// Dimension legend: B = batch, Hq / Hk = query / kv heads, Tq / Tk = query rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#include "kernels/zoo_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "attncheck/problem_v2.hpp"
#include "reference/attention_v2.hpp"

namespace attncheck {
namespace {

using Problem = attncheck_problem_v2;
using Grads = attncheck_grads_v2;
using Tensor = attncheck_tensor_v2;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys per block of the key loop: a tiled backward's key tile (dq is carried across blocks).
constexpr std::int64_t kKeyBlock = 64;

enum class Bug {
    none,
    d_term_dropped,           // dS = P dP: the D_i = dout_i . out_i term forgotten
    d_sign_flipped,           // dS = P (dP + D)
    p_unnormalised,           // P = exp(s - row max), the lse not used: the softmax's sum not divided out
    lse_read_as_log2,         // lse taken for log2 units: P = exp2(s log2 e - lse) = exp(s - lse ln 2)
    causal_forgotten,         // the recompute drops the causal mask: future keys get P = exp(s - lse)
    window_off_by_one,        // the backward's window keeps j > a - w (w keys), the forward's w + 1
    mask_top_left,            // causal/window masks at row index i instead of q_pos[b] + i
    alibi_forgotten,          // the recompute's scores without the ALiBi bias
    alibi_row_relative,       // the recompute's ALiBi distance from the row index i, not q_pos[b] + i
    softcap_derivative_dropped,  // dS not multiplied by 1 - tanh^2
    softcap_derivative_linear,   // dS multiplied by 1 - tanh instead of 1 - tanh^2
    dk_unscaled,              // dk_j += dS q_i: the scale forgotten in dk
    dq_unscaled,              // dq_i = sum dS k_j: the scale forgotten in dq
    dv_from_ds,               // dv_j += dS dout_i instead of P dout_i
    gqa_last_head_wins,       // GQA: dk/dv written per query head, the group's last head overwriting
    gqa_head_modulo,          // GQA: query head h mapped to kv head h % Hk instead of h / (Hq / Hk)
    padding_rows_unwritten,   // dense dk/dv rows past kv_lens[b] left as they were
    unseen_keys_unwritten,    // dk/dv rows of keys no row sees (and padding) left as they were
    empty_row_nan,            // no guard for a row with no visible key: masked -inf - lse -inf = NaN
    varlen_dkv_from_q,        // varlen: dk/dv rows located with cu_seqlens_q instead of cu_seqlens_k
    dq_block_overwrite,       // dq of a key block overwrites the previous blocks' instead of adding
    d_over_all_keys,          // D = sum_j P_ij dP_ij over every key of the sequence, masked ones too
    dout_with_out_strides,    // dout read through out's strides instead of its own
    dsinks_sign_flipped,      // sinks: dsinks[h] += exp(sink - lse) D instead of -=
    dsinks_per_sequence,      // sinks: dsinks reset for each sequence (the last one's written)
    dsinks_unwritten,         // sinks: dsinks left unwritten
};

// ---- addressing -------------------------------------------------------------------------------

template <Bug bug>
int kv_head_of_query_head(const Problem& p, int h) {
    if constexpr (bug == Bug::gqa_head_modulo) return h % p.kv_heads;
    return kv_head_of(p, h);
}

// Offset of (key row j, column c) of kv head hk of sequence b in dk or dv (dense or varlen).
template <Bug bug>
std::int64_t grad_kv_offset(const Problem& p, const Tensor& t, int b, int hk, int j, int c) {
    if constexpr (bug == Bug::varlen_dkv_from_q)
        if (p.cu_seqlens_k)
            return hk * t.stride[1] + (std::int64_t(p.cu_seqlens_q[b]) + j) * t.stride[2] + c * t.stride[3];
    return kv_offset_v2(p, t, b, hk, j, c);
}

// ---- masking and scoring ----------------------------------------------------------------------

// The keys [lo, hi] one query row sees (empty when lo > hi), and its position for ALiBi.
struct RowKeys {
    std::int64_t lo, hi;
    std::int64_t bias_position;
    bool empty() const { return lo > hi; }
};

template <Bug bug>
RowKeys row_keys(const Problem& p, int b, int i, std::int64_t keys) {
    const std::int64_t position = std::int64_t(p.q_pos[b]) + i;
    std::int64_t a = position;  // the position the masks are aligned to
    if constexpr (bug == Bug::mask_top_left) a = i;
    RowKeys r{0, keys - 1, position};
    if constexpr (bug == Bug::alibi_row_relative) r.bias_position = i;
    if constexpr (bug != Bug::causal_forgotten)
        if (p.causal) r.hi = std::min(r.hi, a);
    if (p.window_left >= 0) {
        r.lo = std::max(r.lo, a - p.window_left);
        if constexpr (bug == Bug::window_off_by_one) r.lo = std::max(r.lo, a - p.window_left + 1);
    }
    if (!p.causal && p.window_right >= 0) r.hi = std::min(r.hi, a + p.window_right);
    return r;
}

// A score recomputed as the forward defines it, with tanh(scale q.k / softcap) kept for the
// softcap's derivative.
struct Score {
    float s;
    float t;  // tanh(scale q.k / softcap); 0 without softcap
};

template <Bug bug>
Score score(const Problem& p, float dot, int h, std::int64_t bias_position, std::int64_t j) {
    Score r{p.scale * dot, 0.0f};
    if (p.softcap > 0) {
        r.t = std::tanh(r.s / p.softcap);
        r.s = p.softcap * r.t;
    }
    if constexpr (bug == Bug::alibi_forgotten) return r;
    if (p.alibi_slopes) r.s -= p.alibi_slopes[h] * float(bias_position - j);
    return r;
}

// dS's factor from the softcap: d(cap tanh(x / cap)) / dx = 1 - tanh^2.
template <Bug bug>
float softcap_derivative(const Problem& p, float t) {
    if (!(p.softcap > 0)) return 1.0f;
    if constexpr (bug == Bug::softcap_derivative_dropped) return 1.0f;
    if constexpr (bug == Bug::softcap_derivative_linear) return 1.0f - t;
    return 1.0f - t * t;
}

// ---- the correct backward (and, instantiated with a Bug, the mutants) -------------------------

template <Bug bug>
int naive_backward_unchecked(const Problem& p, const Grads& g) {
    const std::int64_t Dk = p.head_dim, Dv = p.value_dim, Hk = p.kv_heads;
    const auto size = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    const Tensor& dout_view = bug == Bug::dout_with_out_strides ? p.out : g.dout;  // strides only
    // One row's q, dout and dq (float32), and the key and value rows of the key at hand.
    std::vector<float> q(size(Dk)), dout(size(Dv)), dq(size(Dk)), k(size(Dk)), v(size(Dv));
    std::vector<float> dk, dv;  // [Hk, rows, Dk] and [Hk, rows, Dv] of one sequence: the scratch
    std::vector<char> seen;     // [rows]: whether some query row of the sequence sees the key
    // With sinks, their gradients: -sum over the rows of each query head of exp(sink - lse) D.
    std::vector<float> dsinks(size(p.q_heads), 0.0f);
    for (int b = 0; b < p.batch; ++b) {
        if constexpr (bug == Bug::dsinks_per_sequence) std::fill(dsinks.begin(), dsinks.end(), 0.0f);
        const int Tq = q_len_of(p, b), Tk = kv_len_of(p, b), rows = kv_rows_of(p, b);
        dk.assign(size(Hk * rows * Dk), 0.0f);
        dv.assign(size(Hk * rows * Dv), 0.0f);
        seen.assign(size(rows), 0);
        // The keys the sequence's rows see, as one range (where a kernel without an empty-row
        // guard runs its masked key tiles).
        std::int64_t seq_lo = Tk, seq_hi = -1;
        for (int i = 0; i < Tq; ++i) {
            const RowKeys r = row_keys<Bug::none>(p, b, i, Tk);
            if (!r.empty()) seq_lo = std::min(seq_lo, r.lo), seq_hi = std::max(seq_hi, r.hi);
        }
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = kv_head_of_query_head<bug>(p, h);
            float* dk_head = dk.data() + std::int64_t(hk) * rows * Dk;
            float* dv_head = dv.data() + std::int64_t(hk) * rows * Dv;
            if constexpr (bug == Bug::gqa_last_head_wins) {  // per query head: the last one written wins
                std::fill(dk_head, dk_head + rows * Dk, 0.0f);
                std::fill(dv_head, dv_head + rows * Dv, 0.0f);
            }
            for (int i = 0; i < Tq; ++i) {
                RowKeys r = row_keys<bug>(p, b, i, Tk);
                std::fill(dq.begin(), dq.end(), 0.0f);
                bool masked = false;  // every score of the row -inf (only without the empty-row guard)
                if (r.empty()) {
                    if constexpr (bug == Bug::empty_row_nan) {
                        r.lo = seq_lo, r.hi = seq_hi, masked = true;
                    } else {
                        for (std::int64_t c = 0; c < Dk; ++c)
                            store_element(p.dtype, g.dq.data, q_offset_v2(p, g.dq, b, h, i, int(c)), 0.0f);
                        continue;
                    }
                }
                for (std::int64_t c = 0; c < Dk; ++c)
                    q[size(c)] = load_element(p.dtype, p.q.data, q_offset_v2(p, p.q, b, h, i, int(c)));
                for (std::int64_t c = 0; c < Dv; ++c)
                    dout[size(c)] = load_element(p.dtype, g.dout.data, q_offset_v2(p, dout_view, b, h, i, int(c)));
                const float lse = p.lse[lse_offset_v2(p, b, h, i)];
                const auto dot_key = [&](std::int64_t j) {  // q . k_j, with k_j loaded into k
                    float d = 0.0f;
                    for (std::int64_t c = 0; c < Dk; ++c) {
                        k[size(c)] = load_element(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, int(j), int(c)));
                        d += q[size(c)] * k[size(c)];
                    }
                    return d;
                };
                const auto dot_value = [&](std::int64_t j) {  // dout . v_j, with v_j loaded into v
                    float d = 0.0f;
                    for (std::int64_t c = 0; c < Dv; ++c) {
                        v[size(c)] = load_element(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, int(j), int(c)));
                        d += dout[size(c)] * v[size(c)];
                    }
                    return d;
                };
                // D_i = dout_i . out_i (= sum_j P_ij dP_ij over the keys the row sees).
                float D = 0.0f;
                if constexpr (bug == Bug::d_over_all_keys) {
                    for (std::int64_t j = 0; j < Tk; ++j)
                        D += std::exp(score<bug>(p, dot_key(j), h, r.bias_position, j).s - lse) * dot_value(j);
                } else {
                    for (std::int64_t c = 0; c < Dv; ++c)
                        D += dout[size(c)] * load_element(p.dtype, p.out.data, q_offset_v2(p, p.out, b, h, i, int(c)));
                }
                if (p.sinks) {
                    const float w = std::exp(p.sinks[h] - lse) * D;
                    if constexpr (bug == Bug::dsinks_sign_flipped) dsinks[size(h)] += w;
                    else dsinks[size(h)] -= w;
                }
                // What exp(s - shift) normalises by: the row's log-sum-exp.
                float shift = lse;
                if constexpr (bug == Bug::lse_read_as_log2) shift = lse * std::numbers::ln2_v<float>;
                if constexpr (bug == Bug::p_unnormalised) {
                    shift = kNegInf;
                    for (std::int64_t j = r.lo; j <= r.hi; ++j)
                        shift = std::max(shift, score<bug>(p, dot_key(j), h, r.bias_position, j).s);
                }
                for (std::int64_t t0 = r.empty() ? 0 : r.lo / kKeyBlock * kKeyBlock; t0 <= r.hi; t0 += kKeyBlock) {
                    if constexpr (bug == Bug::dq_block_overwrite) std::fill(dq.begin(), dq.end(), 0.0f);
                    const std::int64_t j0 = std::max(t0, r.lo), j1 = std::min(t0 + kKeyBlock, r.hi + 1);
                    for (std::int64_t j = j0; j < j1; ++j) {
                        seen[size(j)] = 1;
                        Score sc = score<bug>(p, dot_key(j), h, r.bias_position, j);
                        if (masked) sc.s = kNegInf;
                        const float P = std::exp(sc.s - shift);
                        const float dP = dot_value(j);
                        float dS = P * (dP - D);
                        if constexpr (bug == Bug::d_term_dropped) dS = P * dP;
                        if constexpr (bug == Bug::d_sign_flipped) dS = P * (dP + D);
                        dS *= softcap_derivative<bug>(p, sc.t);
                        for (std::int64_t c = 0; c < Dk; ++c) dq[size(c)] += dS * k[size(c)];
                        float dk_factor = p.scale * dS;
                        if constexpr (bug == Bug::dk_unscaled) dk_factor = dS;
                        float* dk_row = dk_head + j * Dk;
                        for (std::int64_t c = 0; c < Dk; ++c) dk_row[c] += dk_factor * q[size(c)];
                        float dv_factor = P;
                        if constexpr (bug == Bug::dv_from_ds) dv_factor = dS;
                        float* dv_row = dv_head + j * Dv;
                        for (std::int64_t c = 0; c < Dv; ++c) dv_row[c] += dv_factor * dout[size(c)];
                    }
                }
                float dq_factor = p.scale;
                if constexpr (bug == Bug::dq_unscaled) dq_factor = 1.0f;
                for (std::int64_t c = 0; c < Dk; ++c)
                    store_element(p.dtype, g.dq.data, q_offset_v2(p, g.dq, b, h, i, int(c)), dq_factor * dq[size(c)]);
            }
        }
        // dk and dv of every k/v row of the sequence: padding rows and keys no row sees get the
        // scratch's zeros.
        for (int hk = 0; hk < Hk; ++hk)
            for (int j = 0; j < rows; ++j) {
                if constexpr (bug == Bug::padding_rows_unwritten)
                    if (j >= Tk) continue;
                if constexpr (bug == Bug::unseen_keys_unwritten)
                    if (!seen[size(j)]) continue;
                const float* dk_row = dk.data() + (std::int64_t(hk) * rows + j) * Dk;
                const float* dv_row = dv.data() + (std::int64_t(hk) * rows + j) * Dv;
                for (int c = 0; c < Dk; ++c)
                    store_element(p.dtype, g.dk.data, grad_kv_offset<bug>(p, g.dk, b, hk, j, c), dk_row[c]);
                for (int c = 0; c < Dv; ++c)
                    store_element(p.dtype, g.dv.data, grad_kv_offset<bug>(p, g.dv, b, hk, j, c), dv_row[c]);
            }
    }
    if (p.sinks && bug != Bug::dsinks_unwritten)
        for (int h = 0; h < p.q_heads; ++h) g.dsinks[h] = dsinks[size(h)];
    return ATTNCHECK_OK;
}

// The C entry point: a malformed call or a block table refused (grads_v2_error), and no exception
// (std::bad_alloc of the scratch) across the C boundary.
template <Bug bug>
int naive_backward(const Problem* p, const Grads* g) noexcept {
    try {
        if (!p || !g || !grads_v2_error(*p, *g).empty()) return ATTNCHECK_UNSUPPORTED;
        return naive_backward_unchecked<bug>(*p, *g);
    } catch (...) {
        return ATTNCHECK_UNSUPPORTED;
    }
}

constexpr const char* kBase = "bwd_naive";
// The forward (the reference kernel) and the backward take attention sinks.
constexpr const char* kDeclaration = "sinks=yes";

KernelEntry base(std::string name, attncheck_kernel_v2_backward_fn fn, std::string description) {
    return {.name = std::move(name), .fn = nullptr, .description = std::move(description),
            .role = KernelRole::zoo_base, .declaration = kDeclaration, .bug = "", .reads_only_visible_keys = false,
            .fn_v2 = attncheck_reference_kernel_v2, .backward_v2 = fn, .backward_only = true};
}

// A mutant's registry entry: the base with one bug in its backward. `reads_out_of_bounds` /
// `writes_out_of_bounds`: on some calls its backward reads outside dout / writes outside dk and
// dv (run it only in an isolated worker, or with its buffers against guard pages).
KernelEntry mutant(std::string name, attncheck_kernel_v2_backward_fn fn, std::string bug,
                   bool reads_out_of_bounds = false, bool writes_out_of_bounds = false) {
    return {.name = std::move(name), .fn = nullptr, .description = std::string(kBase) + " with one bug",
            .role = KernelRole::mutant, .declaration = kDeclaration, .writes_out_of_bounds = writes_out_of_bounds,
            .bug = std::move(bug), .reads_only_visible_keys = false, .fn_v2 = attncheck_reference_kernel_v2,
            .reads_out_of_bounds = reads_out_of_bounds, .backward_v2 = fn, .backward_only = true};
}

}  // namespace

std::vector<KernelEntry> zoo_backward_entries() {
    return {
        base(kBase, naive_backward<Bug::none>,
             "correct v2 backward: per query row P = exp(s - lse), D = dout . out, dS = P (dP - D), dk/dv "
             "summed over the GQA group in a float32 scratch (forward: the float64 reference kernel)"),
        mutant("bwd_d_term_dropped", naive_backward<Bug::d_term_dropped>,
               "dS = P dP: the D_i = dout_i . out_i term of the softmax's backward dropped"),
        mutant("bwd_d_sign_flipped", naive_backward<Bug::d_sign_flipped>,
               "dS = P (dP + D): the D term added instead of subtracted"),
        mutant("bwd_p_unnormalised", naive_backward<Bug::p_unnormalised>,
               "P recomputed as exp(s - row max) without the lse: the probabilities not divided by their sum"),
        mutant("bwd_lse_read_as_log2", naive_backward<Bug::lse_read_as_log2>,
               "lse taken for log2 units: P = exp2(s log2 e - lse) = exp(s - lse ln 2)"),
        mutant("bwd_causal_forgotten", naive_backward<Bug::causal_forgotten>,
               "the recompute drops the causal mask: future keys get P = exp(s - lse) in dq, dk and dv"),
        mutant("bwd_window_off_by_one", naive_backward<Bug::window_off_by_one>,
               "the backward's sliding window keeps j > a - w (w keys) while the forward's keeps w + 1"),
        mutant("bwd_mask_top_left", naive_backward<Bug::mask_top_left>,
               "the recompute's causal/window masks at row index i instead of q_pos[b] + i"),
        mutant("bwd_alibi_forgotten", naive_backward<Bug::alibi_forgotten>,
               "the recompute's scores without the ALiBi bias: P = exp(s + m_h (a - j) - lse)"),
        mutant("bwd_alibi_row_relative", naive_backward<Bug::alibi_row_relative>,
               "the recompute's ALiBi distance from the row index i instead of q_pos[b] + i "
               "(a per-row constant that the forward's softmax cancels, but the given lse does not)"),
        mutant("bwd_softcap_derivative_dropped", naive_backward<Bug::softcap_derivative_dropped>,
               "softcap: dS not multiplied by the cap's derivative 1 - tanh^2"),
        mutant("bwd_softcap_derivative_linear", naive_backward<Bug::softcap_derivative_linear>,
               "softcap: dS multiplied by 1 - tanh instead of 1 - tanh^2"),
        mutant("bwd_dk_unscaled", naive_backward<Bug::dk_unscaled>,
               "dk_j = sum_i dS_ij q_i: the softmax scale missing from dk"),
        mutant("bwd_dq_unscaled", naive_backward<Bug::dq_unscaled>,
               "dq_i = sum_j dS_ij k_j: the softmax scale missing from dq"),
        mutant("bwd_dv_from_ds", naive_backward<Bug::dv_from_ds>,
               "dv_j = sum_i dS_ij dout_i instead of P_ij dout_i"),
        mutant("bwd_gqa_last_head_wins", naive_backward<Bug::gqa_last_head_wins>,
               "GQA: dk and dv written per query head instead of summed over the group (the last head wins)"),
        mutant("bwd_gqa_head_modulo", naive_backward<Bug::gqa_head_modulo>,
               "GQA: query head h mapped to kv head h % kv_heads instead of h / (q_heads / kv_heads)"),
        mutant("bwd_padding_rows_unwritten", naive_backward<Bug::padding_rows_unwritten>,
               "dense: dk and dv rows past kv_lens[b] left unwritten instead of 0"),
        mutant("bwd_unseen_keys_unwritten", naive_backward<Bug::unseen_keys_unwritten>,
               "dk and dv rows of keys no query row sees (outside every window, and padding) left unwritten"),
        mutant("bwd_empty_row_nan", naive_backward<Bug::empty_row_nan>,
               "no guard for a row with no visible key: its masked scores give P = exp(-inf - (-inf)) = NaN "
               "over the sequence's keys, into dq, dk and dv"),
        mutant("bwd_varlen_dkv_from_q", naive_backward<Bug::varlen_dkv_from_q>,
               "varlen: dk and dv rows located with cu_seqlens_q instead of cu_seqlens_k",
               // Its writes may land past dk's guards: run it isolated, as a kernel that may fault.
               /*reads_out_of_bounds=*/true, /*writes_out_of_bounds=*/true),
        mutant("bwd_dq_block_overwrite", naive_backward<Bug::dq_block_overwrite>,
               "dq of each 64-key block overwrites the previous blocks' instead of adding to it (Tk > 64)"),
        mutant("bwd_d_over_all_keys", naive_backward<Bug::d_over_all_keys>,
               "D = sum_j P_ij dP_ij from the recomputed P over every key of the sequence, masked ones included"),
        mutant("bwd_dsinks_sign_flipped", naive_backward<Bug::dsinks_sign_flipped>,
               "sinks: dsinks[h] = +sum exp(sink - lse) D instead of -sum (the sink's weight grows the wrong way)"),
        mutant("bwd_dsinks_per_sequence", naive_backward<Bug::dsinks_per_sequence>,
               "sinks: dsinks reset for each sequence, so only the last sequence's rows count"),
        mutant("bwd_dsinks_unwritten", naive_backward<Bug::dsinks_unwritten>, "sinks: dsinks left unwritten"),
        mutant("bwd_dout_with_out_strides", naive_backward<Bug::dout_with_out_strides>,
               "dout read through out's strides instead of its own",
               /*reads_out_of_bounds=*/true),
    };
}

}  // namespace attncheck
