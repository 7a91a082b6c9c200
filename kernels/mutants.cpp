// kernels/mutants.cpp — the mutant zoo: deliberately broken attention kernels, each the zoo's
// correct textbook kernel with exactly ONE bug that kernel authors really ship.
//
// Quick start for adding a mutant:
//   1. Add a value to `enum class Bug` below and switch on its one deviation with an
//      `if constexpr (bug == Bug::your_bug)` at the one place a real kernel gets it wrong in
//      textbook_kernel (or write a kernel of its own beside online_kernel if the bug needs
//      another algorithm).
//   2. Add its entry to zoo_entries() at the end of this file: mutant("your_bug",
//      textbook_kernel<Bug::your_bug>, "one line: what is wrong"). The name is what reports and
//      `--kernel NAME` use; keep the existing names as they are.
//   3. Build and run `attncheck fuzz --mutants`: every mutant must be killed (exit 0), and
//      `ctest -R zoo` checks that some witness problem exposes it (tests/zoo/mutants_test.cpp).
//      A mutant no property kills is a gap in the properties (or a bug not observable through
//      the ABI, which is not a mutant).
//
// Why the zoo exists: a property suite that passes every correct kernel proves nothing until it
// also fails broken ones. The bugs come from real kernels (masking alignment, softmax stability,
// padding, strides, memory safety, precision, determinism), not tuned to the properties: each is
// observable through the ABI as a black box. Bug::none is the correct kernel (two-pass masked
// softmax with max-subtraction, in float32, like reference/attention.hpp); keeping every mutant
// a one-line `if constexpr` away from the same correct code makes "exactly one bug" true by
// construction, and lets a reader diff a mutant against the base at a glance.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include "kernels/mutants.hpp"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
namespace {

enum class Bug {
    none,
    causal_ignores_q_offset,
    diagonal_masked,
    future_peek,
    causal_bottom_right,
    missing_scale,
    scale_twice,
    no_max_subtraction,
    exp2_without_log2e,
    mask_after_softmax,
    nan_on_empty_row,
    padding_ignored,
    padding_from_first_sequence,
    heads_mixed,
    batch_head_transposed,
    drops_last_key,
    drops_last_value_column,
    probs_bf16,
    accumulates_into_out,
    input_modified,
    oob_write,
    nondeterministic,
    // Bugs of blocked kernels that only show on long sequences or wide heads (the generators'
    // large tier is there to reach them):
    tile_edge_key_dropped,     // the first key of every 64-key tile after the first is skipped
    split_k_chunk_lost,        // a split-K decode merges its 512-key chunks but forgets chunk 0
    lane_remainder_dropped,    // a 16-lane fast path for Dk >= 64 drops the Dk % 16 tail columns
};

// Round to bfloat16 (8 significant bits), nearest-even, and back: what a kernel that stores P in
// bf16 before the P.V product computes.
float round_to_bf16(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    std::memcpy(&x, &u, sizeof u);
    return x;
}

// Calls of the nondeterministic mutant so far (process-wide, like a kernel's hidden state).
std::atomic<std::uint64_t> g_nondeterministic_calls{0};

// One function with every bug a line away from the correct code: split, the diff against the
// base would no longer be visible at a glance.
template <Bug bug>
int textbook_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                    float* out) {
    if (!p || !problem_error(*p).empty()) return ATTNCHECK_UNSUPPORTED;
    const std::int64_t B = p->batch, H = p->heads, Tq = p->q_len, Tk = p->kv_len,
                       Dk = p->head_dim, Dv = p->value_dim;
    const float neg_inf = -std::numeric_limits<float>::infinity();

    float scale = p->scale;
    if constexpr (bug == Bug::missing_scale) scale = 1.0f;
    if constexpr (bug == Bug::scale_twice) scale = p->scale * p->scale;
    if constexpr (bug == Bug::input_modified) {
        // "Saves a multiply per key": folds the scale into q, in the caller's buffer.
        float* q_mut = const_cast<float*>(q);
        for (std::int64_t x = 0; x < B * H * Tq * Dk; ++x) q_mut[x] *= p->scale;
        scale = 1.0f;
    }

    std::vector<float> s(static_cast<std::size_t>(Tk));    // scores of one query row [Tk]
    std::vector<float> w(static_cast<std::size_t>(Tk));    // its probabilities [Tk]
    std::vector<float> acc(static_cast<std::size_t>(Dv));  // its output row [Dv]
    for (std::int64_t b = 0; b < B; ++b) {
        std::int64_t valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        if constexpr (bug == Bug::padding_ignored) valid = Tk;
        if constexpr (bug == Bug::padding_from_first_sequence)
            valid = p->kv_valid_len ? p->kv_valid_len[0] : Tk;
        for (std::int64_t h = 0; h < H; ++h) {
            const std::int64_t qo_slot = b * H + h;  // (b, h) of q and out
            std::int64_t kv_slot = b * H + h;        // (b, h) of k and v
            if constexpr (bug == Bug::heads_mixed) kv_slot = b * H + (h + 1) % H;
            if constexpr (bug == Bug::batch_head_transposed) kv_slot = h * B + b;  // reads [H, B, ...]
            const float* qh = q + qo_slot * Tq * Dk;  // [Tq, Dk]
            const float* kh = k + kv_slot * Tk * Dk;  // [Tk, Dk]
            const float* vh = v + kv_slot * Tk * Dv;  // [Tk, Dv]
            float* oh = out + qo_slot * Tq * Dv;      // [Tq, Dv]

            for (std::int64_t i = 0; i < Tq; ++i) {
                // Absolute position of query row i: the last key it may see.
                std::int64_t last = p->q_offset + i;
                if constexpr (bug == Bug::causal_ignores_q_offset) last = i;
                if constexpr (bug == Bug::causal_bottom_right) last = (Tk - Tq) + i;
                std::int64_t key_end = Tk;
                if constexpr (bug == Bug::drops_last_key) key_end = Tk - 1;

                for (std::int64_t j = 0; j < Tk; ++j) {
                    bool visible = j < valid && j < key_end;
                    if constexpr (bug == Bug::tile_edge_key_dropped) visible = visible && !(j >= 64 && j % 64 == 0);
                    if constexpr (bug == Bug::split_k_chunk_lost)
                        visible = visible && !(Tq <= 64 && Tk > 512 && j < 512);
                    if (p->causal) {
                        if constexpr (bug == Bug::diagonal_masked) visible = visible && j < last;
                        else if constexpr (bug == Bug::future_peek) visible = visible && j <= last + 1;
                        else visible = visible && j <= last;
                    }
                    float dot = 0;
                    std::int64_t dot_end = Dk;
                    if constexpr (bug == Bug::lane_remainder_dropped)
                        if (Dk >= 64) dot_end = Dk - Dk % 16;
                    for (std::int64_t c = 0; c < dot_end; ++c) dot += qh[i * Dk + c] * kh[j * Dk + c];
                    if constexpr (bug == Bug::mask_after_softmax) {
                        s[std::size_t(j)] = scale * dot;  // the mask waits until after the softmax
                        w[std::size_t(j)] = visible ? 1.0f : 0.0f;
                    } else {
                        s[std::size_t(j)] = visible ? scale * dot : neg_inf;
                    }
                }

                float row_max = neg_inf;
                for (std::int64_t j = 0; j < Tk; ++j) row_max = std::max(row_max, s[std::size_t(j)]);
                if constexpr (bug != Bug::nan_on_empty_row) {
                    if (row_max == neg_inf) {  // no visible key: zeros, not 0/0
                        for (std::int64_t c = 0; c < Dv; ++c) oh[i * Dv + c] = 0.0f;
                        continue;
                    }
                }
                if constexpr (bug == Bug::no_max_subtraction) row_max = 0.0f;
                float sum = 0;
                for (std::int64_t j = 0; j < Tk; ++j) {
                    float e;
                    if constexpr (bug == Bug::exp2_without_log2e) e = std::exp2(s[std::size_t(j)] - row_max);
                    else e = std::exp(s[std::size_t(j)] - row_max);
                    if constexpr (bug == Bug::mask_after_softmax) {
                        const float keep = w[std::size_t(j)];
                        w[std::size_t(j)] = e;
                        sum += e;
                        s[std::size_t(j)] = keep;  // reuse s as the keep flags
                    } else {
                        w[std::size_t(j)] = e;
                        sum += e;
                    }
                }
                for (std::int64_t j = 0; j < Tk; ++j) {
                    float pj = w[std::size_t(j)] / sum;
                    if constexpr (bug == Bug::mask_after_softmax) pj *= s[std::size_t(j)];  // no renormalising
                    if constexpr (bug == Bug::probs_bf16) pj = round_to_bf16(pj);
                    w[std::size_t(j)] = pj;
                }

                std::int64_t col_end = Dv;
                if constexpr (bug == Bug::drops_last_value_column) col_end = Dv - 1;
                for (std::int64_t c = 0; c < Dv; ++c) acc[std::size_t(c)] = 0.0f;
                for (std::int64_t j = 0; j < Tk; ++j) {
                    const float pj = w[std::size_t(j)];
                    if (pj == 0.0f) continue;
                    for (std::int64_t c = 0; c < col_end; ++c) acc[std::size_t(c)] += pj * vh[j * Dv + c];
                }
                for (std::int64_t c = 0; c < col_end; ++c) {
                    if constexpr (bug == Bug::accumulates_into_out) oh[i * Dv + c] += acc[std::size_t(c)];
                    else oh[i * Dv + c] = acc[std::size_t(c)];
                }
            }
        }
    }

    const std::int64_t total = B * H * Tq * Dv;
    if constexpr (bug == Bug::oob_write) out[total] = out[total - 1];  // a vector tail store one too far
    if constexpr (bug == Bug::nondeterministic) {
        if (g_nondeterministic_calls.fetch_add(1, std::memory_order_relaxed) % 2 == 1)
            for (std::int64_t x = 0; x < total; ++x)
                out[x] = std::nextafter(out[x], std::numeric_limits<float>::infinity());
    }
    return ATTNCHECK_OK;
}

// The correct kernel in its streaming form (FlashAttention's online softmax over key tiles of
// two), and the mutant that forgets to rescale the accumulator when the running max grows.
constexpr std::int64_t kOnlineTile = 2;

template <bool rescale_accumulator>
int online_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                  float* out) {
    if (!p || !problem_error(*p).empty()) return ATTNCHECK_UNSUPPORTED;
    const std::int64_t B = p->batch, H = p->heads, Tq = p->q_len, Tk = p->kv_len,
                       Dk = p->head_dim, Dv = p->value_dim;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    std::vector<float> acc(static_cast<std::size_t>(Dv));  // unnormalised output row [Dv]
    for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        for (std::int64_t h = 0; h < H; ++h) {
            const std::int64_t bh = b * H + h;
            const float* qh = q + bh * Tq * Dk;  // [Tq, Dk]
            const float* kh = k + bh * Tk * Dk;  // [Tk, Dk]
            const float* vh = v + bh * Tk * Dv;  // [Tk, Dv]
            float* oh = out + bh * Tq * Dv;      // [Tq, Dv]
            for (std::int64_t i = 0; i < Tq; ++i) {
                float m = neg_inf, l = 0;  // running max and running sum of exp(s - m)
                for (auto& a : acc) a = 0.0f;
                for (std::int64_t t0 = 0; t0 < Tk; t0 += kOnlineTile) {
                    const std::int64_t t1 = std::min(Tk, t0 + kOnlineTile);
                    float tile_s[kOnlineTile];  // scores of this tile
                    float tile_max = neg_inf;
                    for (std::int64_t j = t0; j < t1; ++j) {
                        const bool visible = j < valid && (!p->causal || j <= p->q_offset + i);
                        float dot = 0;
                        for (std::int64_t c = 0; c < Dk; ++c) dot += qh[i * Dk + c] * kh[j * Dk + c];
                        tile_s[j - t0] = visible ? p->scale * dot : neg_inf;
                        tile_max = std::max(tile_max, tile_s[j - t0]);
                    }
                    if (tile_max == neg_inf) continue;  // nothing visible in this tile
                    const float m_new = std::max(m, tile_max);
                    const float alpha = std::exp(m - m_new);  // exp(-inf) = 0 on the first tile
                    l *= alpha;
                    if constexpr (rescale_accumulator)
                        for (auto& a : acc) a *= alpha;
                    for (std::int64_t j = t0; j < t1; ++j) {
                        const float e = std::exp(tile_s[j - t0] - m_new);
                        l += e;
                        if (e == 0.0f) continue;
                        for (std::int64_t c = 0; c < Dv; ++c) acc[std::size_t(c)] += e * vh[j * Dv + c];
                    }
                    m = m_new;
                }
                for (std::int64_t c = 0; c < Dv; ++c)
                    oh[i * Dv + c] = l > 0 ? acc[std::size_t(c)] / l : 0.0f;
            }
        }
    }
    return ATTNCHECK_OK;
}

// A mutant's registry entry; `writes_out_of_bounds`: it writes outside out (call it only with
// guard elements after out, or in an isolated worker). No mutant declares reads_only_visible_keys:
// its base does not keep that promise (below), and several bugs are reads past the visible keys
// themselves (future_peek, causal_bottom_right, padding_ignored, padding_from_first_sequence,
// mask_after_softmax), which the whole-cache call would feed stale rows. The decoder gives each
// mutant the exact problem, one head at a time.
KernelEntry mutant(std::string name, attncheck_kernel_fn fn, std::string bug, bool writes_out_of_bounds = false) {
    const bool online = fn == online_kernel<false>;
    return {std::move(name), fn, online ? "zoo_online_base with one bug" : "zoo_base with one bug", KernelRole::mutant,
            "", writes_out_of_bounds, std::move(bug), /*reads_only_visible_keys=*/false};
}

}  // namespace

std::vector<KernelEntry> zoo_entries() {
    // Neither base reads only visible keys: both take the dot product of every query row with
    // all kv_len key rows and mask the score afterwards (correct results, but the reads and the
    // cost grow with kv_len).
    return {
        {"zoo_base", textbook_kernel<Bug::none>,
         "the zoo's correct textbook kernel: two-pass masked softmax with max-subtraction, float32",
         KernelRole::zoo_base, "", false, "", /*reads_only_visible_keys=*/false},
        {"zoo_online_base", online_kernel<true>,
         "the zoo's correct streaming kernel: online softmax over key tiles of 2, float32", KernelRole::zoo_base, "",
         false, "", /*reads_only_visible_keys=*/false},
        mutant("causal_ignores_q_offset", textbook_kernel<Bug::causal_ignores_q_offset>,
               "causal mask aligned to query row i instead of its position q_offset + i (breaks decode and chunked prefill)"),
        mutant("diagonal_masked", textbook_kernel<Bug::diagonal_masked>,
               "causal mask uses j < q_offset + i: a query cannot see its own key"),
        mutant("future_peek", textbook_kernel<Bug::future_peek>,
               "causal mask uses j <= q_offset + i + 1: every query sees one key of the future"),
        mutant("causal_bottom_right", textbook_kernel<Bug::causal_bottom_right>,
               "causal mask aligned to the end of the keys (q_offset taken as kv_len - q_len) instead of q_offset"),
        mutant("missing_scale", textbook_kernel<Bug::missing_scale>,
               "scale never applied: softmax of raw q.k"),
        mutant("scale_twice", textbook_kernel<Bug::scale_twice>,
               "scale applied twice (caller pre-scaled q and the kernel scales again): softmax of scale^2 q.k"),
        mutant("no_max_subtraction", textbook_kernel<Bug::no_max_subtraction>,
               "softmax without subtracting the row max: exp overflows to inf and the row becomes NaN on large scores"),
        mutant("exp2_without_log2e", textbook_kernel<Bug::exp2_without_log2e>,
               "exp2 used for exp without folding log2(e) into the scale: softmax at the wrong temperature"),
        mutant("mask_after_softmax", textbook_kernel<Bug::mask_after_softmax>,
               "softmax over all keys, then masked weights zeroed without renormalising: rows sum to less than 1"),
        mutant("nan_on_empty_row", textbook_kernel<Bug::nan_on_empty_row>,
               "a row with no visible key (all padding) computes exp(-inf - -inf)/0 = NaN instead of zeros"),
        mutant("padding_ignored", textbook_kernel<Bug::padding_ignored>,
               "kv_valid_len ignored: padded keys and values are attended to"),
        mutant("padding_from_first_sequence", textbook_kernel<Bug::padding_from_first_sequence>,
               "kv_valid_len[0] used for every sequence of the batch instead of kv_valid_len[b]"),
        mutant("heads_mixed", textbook_kernel<Bug::heads_mixed>,
               "keys and values of head h read from head (h + 1) % H"),
        mutant("batch_head_transposed", textbook_kernel<Bug::batch_head_transposed>,
               "k and v indexed as [H, B, ...] (h * B + b) instead of [B, H, ...] (b * H + h)"),
        mutant("drops_last_key", textbook_kernel<Bug::drops_last_key>,
               "key loop bound kv_len - 1: the last key is never attended to"),
        mutant("drops_last_value_column", textbook_kernel<Bug::drops_last_value_column>,
               "output column loop bound value_dim - 1: the last column of out is never written"),
        mutant("probs_bf16", textbook_kernel<Bug::probs_bf16>,
               "probabilities rounded to bfloat16 before P.V: errors of ~0.4% of each weight"),
        mutant("online_rescale_forgotten", online_kernel<false>,
               "online softmax over key tiles of 2 forgets to rescale the accumulator when the running max grows"),
        mutant("accumulates_into_out", textbook_kernel<Bug::accumulates_into_out>,
               "adds the result into out instead of overwriting it (assumes the caller zeroed out)"),
        mutant("input_modified", textbook_kernel<Bug::input_modified>,
               "scales q in place (q *= scale) and leaves the caller's q modified"),
        mutant("oob_write", textbook_kernel<Bug::oob_write>,
               "writes one float past the end of out (out[B*H*Tq*Dv])", /*writes_out_of_bounds=*/true),
        mutant("nondeterministic", textbook_kernel<Bug::nondeterministic>,
               "every other call moves each output by one ulp (hidden global state): same call, different bits"),
        mutant("tile_edge_key_dropped", textbook_kernel<Bug::tile_edge_key_dropped>,
               "the first key of every 64-key tile after the first (j = 64, 128, ...) is skipped: only Tk > 64 shows it"),
        mutant("split_k_chunk_lost", textbook_kernel<Bug::split_k_chunk_lost>,
               "a split-K decode (Tq <= 64) over 512-key chunks drops chunk 0 in the merge: only Tk > 512 shows it"),
        mutant("lane_remainder_dropped", textbook_kernel<Bug::lane_remainder_dropped>,
               "the 16-lane dot-product path for head_dim >= 64 drops the head_dim % 16 tail columns"),
    };
}

}  // namespace attncheck
