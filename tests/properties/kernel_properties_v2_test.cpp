// tests/properties/kernel_properties_v2_test.cpp — the kernel properties on version 2 kernels at a
// CI budget: a plain float32 kernel passes every one (the built-ins do in properties_test.cpp), and
// small kernels with one planted bug each (the bug classes of KERNEL_ABI.md version 2) fail the
// property meant for it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attncheck/problem_v2.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/fuzz.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/property_runs.hpp"
#include "reference/attention_v2.hpp"
#include "tests/properties/ci_params.hpp"

using namespace attncheck;
using namespace attncheck::properties;

namespace {

enum class Bug {
    none,
    gqa_modulus,   // kv head h % Hk: the group size used as modulus instead of h / (Hq / Hk)
    window_2w,     // a window of 2w + 1 keys instead of w + 1
    padding_read,  // a dense cache's rows past Tk(b) enter the sum with weight 0 (0 * NaN = NaN)
    lse_log2,      // lse in log2 units
    write_before,  // writes one element before out
    decode_tile,   // a decode step (Tq = 1) drops the keys past the last full 32-key tile
    contiguous_q,  // reads a dense q as contiguous [B,H,T,D] whatever its strides
    pages_in_order,  // takes key j from block j / block_size, ignoring the block table
    softcap_skipped,  // computes without the softcap
    contiguous_only,  // refuses (returns 2) any q other than contiguous [B,H,T,D]
    no_checks,     // checks nothing: accepts a malformed problem (the property keeps its reads in bounds)
    tanh_12_bits,  // the softcap's tanhf rounded to 12 significant bits (relative error <= 2^-12, a GPU tanh.approx)
    sees_future,   // ignores the causal mask: a row sees the keys after its position (within Tk(b))
    nan_in_varlen, // writes NaN into out[0] of a packed variable-length batch (correct when called per sequence)
    skips_key0,    // key 0 never enters a row at a position past 0 (a mask off by one at the start)
    // Not a bug, a style of correct kernel: every key of Tk(b) is scored, and the mask added as
    // -inf (PyTorch's scaled_dot_product_attention with an attn_mask). A key no row sees enters
    // as score + (-inf): finite values there change nothing, NaN would (NaN + -inf is NaN).
    additive_mask,
};

// tanhf with the low 12 of the 23 mantissa bits rounded away (to nearest): 12 significant bits.
float tanh_12_bits(float x) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(std::tanh(x));
    u = (u + 0x800u) & ~0xFFFu;
    return std::bit_cast<float>(u);
}

// Attention in float32 with the row max subtracted, row by row through the ABI's addressing.
template <Bug bug>
int plain_kernel(const attncheck_problem_v2* pp) {
    const attncheck_problem_v2& p = *pp;
    if (bug != Bug::no_checks && !problem_v2_error(p).empty()) return 1;
    if (bug == Bug::contiguous_only &&
        (p.cu_seqlens_q || p.q.stride[3] != 1 || p.q.stride[2] != p.head_dim || p.q.stride[1] != std::int64_t(p.q_len) * p.head_dim))
        return 2;
    for (int b = 0; b < p.batch; ++b) {
        const int Tk = kv_len_of(p, b);
        const bool dense = !p.cu_seqlens_k && !p.block_table;
        int keys = bug == Bug::padding_read && dense ? p.kv_len : Tk;
        if (bug == Bug::decode_tile && q_len_of(p, b) == 1 && Tk > 32) keys = Tk / 32 * 32;
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = bug == Bug::gqa_modulus ? h % p.kv_heads : h / std::max(1, p.q_heads / p.kv_heads);
            for (int i = 0; i < q_len_of(p, b); ++i) {
                const std::int64_t a = std::int64_t(p.q_pos[b]) + i;
                std::vector<float> s(std::size_t(keys), -std::numeric_limits<float>::infinity());
                std::vector<char> vis(std::size_t(keys), 0);
                float m = -std::numeric_limits<float>::infinity();
                for (int j = 0; j < keys; ++j) {
                    bool v = j < Tk && visible_v2(p, b, i, j);
                    if (bug == Bug::window_2w && j < Tk && p.window_left >= 0)
                        v = (!p.causal || j <= a) && j >= a - 2 * p.window_left &&
                            (p.causal || p.window_right < 0 || j <= a + p.window_right);
                    if (bug == Bug::skips_key0 && j == 0 && a > 0) v = false;
                    if (bug == Bug::sees_future && j < Tk)
                        v = (p.window_left < 0 || j >= a - p.window_left) && (p.causal || p.window_right < 0 || j <= a + p.window_right);
                    const bool scored = v || (bug == Bug::padding_read && j >= Tk) || (bug == Bug::additive_mask && j < Tk);
                    if (!scored) continue;
                    float dot = 0;
                    for (int c = 0; c < p.head_dim; ++c) {
                        std::int64_t qo = q_offset_v2(p, p.q, b, h, i, c);
                        if (bug == Bug::contiguous_q && !p.cu_seqlens_q)
                            qo = ((std::int64_t(b) * p.q_heads + h) * p.q_len + i) * p.head_dim + c;
                        std::int64_t ko = kv_offset_v2(p, p.k, b, hk, j, c);
                        if (bug == Bug::pages_in_order && p.block_table)
                            ko = (j / p.block_size) * p.k.stride[0] + hk * p.k.stride[1] + (j % p.block_size) * p.k.stride[2] + c;
                        dot += load_element(p.dtype, p.q.data, qo) * load_element(p.dtype, p.k.data, ko);
                    }
                    float x = p.scale * dot;
                    if (p.softcap > 0 && bug != Bug::softcap_skipped)
                        x = p.softcap * (bug == Bug::tanh_12_bits ? tanh_12_bits(x / p.softcap) : std::tanh(x / p.softcap));
                    if (p.alibi_slopes) x -= p.alibi_slopes[h] * float(a - j);
                    if (bug == Bug::additive_mask && !v) x += -std::numeric_limits<float>::infinity();
                    s[std::size_t(j)] = x;
                    vis[std::size_t(j)] = v || bug == Bug::additive_mask ? 1 : 0;
                    if (v) m = std::max(m, x);
                }
                float sum = 0;
                std::vector<float> acc(std::size_t(p.value_dim), 0.0f);
                for (int j = 0; j < keys; ++j) {
                    if (!vis[std::size_t(j)] && !(bug == Bug::padding_read && j >= Tk)) continue;
                    const float w = vis[std::size_t(j)] ? std::exp(s[std::size_t(j)] - m) : 0.0f * s[std::size_t(j)];
                    sum += w;
                    for (int c = 0; c < p.value_dim; ++c) acc[std::size_t(c)] += w * load_element(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, j, c));
                }
                const bool empty = !(sum > 0) && std::isinf(m);
                for (int c = 0; c < p.value_dim; ++c)
                    store_element(p.dtype, p.out.data, q_offset_v2(p, p.out, b, h, i, c), empty ? 0.0f : acc[std::size_t(c)] / sum);
                if (p.lse) {
                    float l = empty ? -std::numeric_limits<float>::infinity() : m + std::log(sum);
                    if (bug == Bug::lse_log2 && !empty) l = l / std::log(2.0f);
                    p.lse[lse_offset_v2(p, b, h, i)] = l;
                }
            }
        }
    }
    if (bug == Bug::write_before) store_element(p.dtype, p.out.data, -1, 0.0f);
    if (bug == Bug::nan_in_varlen && p.cu_seqlens_q && p.batch > 1)
        store_element(p.dtype, p.out.data, q_offset_v2(p, p.out, 0, 0, 0, 0), std::numeric_limits<float>::quiet_NaN());
    return 0;
}

// Correct float32 kernels that split each row's visible keys into chunks of kChunk keys (not a
// power of two) and merge them in the two ways split-KV kernels do:
//   rescaled    each chunk's maximum, sum and unnormalised P V, rescaled to the largest maximum
//               and divided once at the end;
//   normalised  flash-decoding (FlashAttention-2's combine): each chunk's normalised output o_c
//               and float32 lse_c, lse = M + log sum_c exp(lse_c - M), o = sum_c exp(lse_c - lse) o_c.
enum class Merge { rescaled, normalised };
constexpr std::size_t kChunk = 5;

template <Merge merge>
int split_kernel(const attncheck_problem_v2* pp) {
    const attncheck_problem_v2& p = *pp;
    if (!problem_v2_error(p).empty()) return 1;
    const float inf = std::numeric_limits<float>::infinity();
    const std::size_t Dv = std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h) {
            const int hk = h / (p.q_heads / p.kv_heads);
            for (int i = 0; i < q_len_of(p, b); ++i) {
                const float a = float(std::int64_t(p.q_pos[b]) + i);
                std::vector<int> js;
                std::vector<float> s;
                for (int j = 0; j < kv_len_of(p, b); ++j) {
                    if (!visible_v2(p, b, i, j)) continue;
                    float dot = 0;
                    for (int c = 0; c < p.head_dim; ++c)
                        dot += load_element(p.dtype, p.q.data, q_offset_v2(p, p.q, b, h, i, c)) *
                               load_element(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, j, c));
                    float x = p.scale * dot;
                    if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
                    if (p.alibi_slopes) x -= p.alibi_slopes[h] * (a - float(j));
                    js.push_back(j);
                    s.push_back(x);
                }
                // Each chunk's maximum m, sum of weights l and unnormalised P V.
                const std::size_t chunks = (js.size() + kChunk - 1) / kChunk;
                std::vector<float> m(chunks, -inf), l(chunks, 0.0f);
                std::vector<std::vector<float>> pv(chunks, std::vector<float>(Dv, 0.0f));
                for (std::size_t t = 0; t < js.size(); ++t) m[t / kChunk] = std::max(m[t / kChunk], s[t]);
                for (std::size_t t = 0; t < js.size(); ++t) {
                    const std::size_t c = t / kChunk;
                    const float w = std::exp(s[t] - m[c]);
                    l[c] += w;
                    for (std::size_t d = 0; d < Dv; ++d)
                        pv[c][d] += w * load_element(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, js[t], int(d)));
                }
                std::vector<float> out(Dv, 0.0f);
                float lse = -inf;
                if (chunks > 0 && merge == Merge::rescaled) {
                    const float M = *std::max_element(m.begin(), m.end());
                    float sum = 0;
                    for (std::size_t c = 0; c < chunks; ++c) {
                        const float w = std::exp(m[c] - M);
                        sum += w * l[c];
                        for (std::size_t d = 0; d < Dv; ++d) out[d] += w * pv[c][d];
                    }
                    for (float& o : out) o /= sum;
                    lse = M + std::log(sum);
                } else if (chunks > 0) {
                    std::vector<float> lse_c(chunks);
                    for (std::size_t c = 0; c < chunks; ++c) lse_c[c] = m[c] + std::log(l[c]);
                    const float M = *std::max_element(lse_c.begin(), lse_c.end());
                    float sum = 0;
                    for (const float x : lse_c) sum += std::exp(x - M);
                    lse = M + std::log(sum);
                    for (std::size_t c = 0; c < chunks; ++c) {
                        const float w = std::exp(lse_c[c] - lse);
                        for (std::size_t d = 0; d < Dv; ++d) out[d] += w * (pv[c][d] / l[c]);
                    }
                }
                for (std::size_t d = 0; d < Dv; ++d) store_element(p.dtype, p.out.data, q_offset_v2(p, p.out, b, h, i, int(d)), out[d]);
                if (p.lse) p.lse[lse_offset_v2(p, b, h, i)] = lse;
            }
        }
    return 0;
}

// A kernel (the reference kernel by default) refusing (returning 2) every problem outside
// declaration `which` of kRefusing, as a kernel that declares honestly does.
constexpr const char* kRefusing[] = {"layout=contiguous", "max_q_len=1", "value_dim=4..8", "value_dim=3"};
template <int which, int (*fn)(const attncheck_problem_v2*) = attncheck_reference_kernel_v2>
int refusing_reference(const attncheck_problem_v2* p) {
    static const KernelDeclaration d = KernelDeclaration::parse(kRefusing[which]);
    if (!problem_v2_error(*p).empty() || !d.unsupported_reason(*p).empty()) return 2;
    return fn(p);
}

const KernelProperty& property(const std::string& name) {
    for (const auto& p : kernel_properties())
        if (p.name == name) return p;
    FAIL("no v2 property " << name);
    throw;
}

RunParams params(int cases) {
    RunParams r = test::ci_params(cases);
    r.shrink_budget_s = 10;
    return r;
}

// For a run that must find a planted bug: the claim is "killed within `cases` cases", so a smaller
// CI budget (the sanitizer job runs 10 cases per property) keeps the seed it sets and not its count.
// A failing run stops at its first counterexample, so the floor costs little.
RunParams kill_params(int cases) {
    RunParams r = params(cases);
    r.cases = std::max(r.cases, cases);
    return r;
}

std::string report(const PropertyResult& r, const std::string& subject) {
    return subject + " / " + r.property + ": " + to_string(r.status) + " (" + std::to_string(r.cases) + " cases, " +
           std::to_string(r.unsupported) + " refused, " + std::to_string(r.notes) + " notes) at case " + std::to_string(r.failed_at) + "\n" +
           r.counterexample + "\n" + r.message + (r.note.empty() ? "" : "\nnote: " + r.note);
}

KernelUnderTest v2_kernel(const std::string& name, attncheck_kernel_v2_fn fn, const std::string& declaration = "") {
    KernelUnderTest k;
    k.name = name;
    k.fn_v2 = fn;
    k.declaration = KernelDeclaration::parse(declaration);
    return k;
}

}  // namespace

// The reference kernel runs every property in properties_test.cpp, as a built-in kernel.
TEST_CASE("a plain float32 kernel passes every v2 property", "[properties_v2]") {
    const RunParams p = params(60);
    for (const KernelUnderTest& k : {v2_kernel("plain_f32", plain_kernel<Bug::none>),
                                     v2_kernel("plain_f32 (additive -inf mask over every key of Tk(b))",
                                               plain_kernel<Bug::additive_mask>)})
        for (const KernelProperty& prop : kernel_properties()) {
            if (needs_backward(prop)) continue;  // no backward pass
            const PropertyResult r = run_kernel_property(prop, k, p);
            INFO(report(r, k.name));
            CHECK(r.status == Status::pass);
            CHECK(r.unsupported == 0);
        }
}

TEST_CASE("split-KV kernels of both merge styles agree with the oracle on out and lse", "[properties_v2]") {
    // The properties that compare with the oracle, at more cases than the others: the merge of
    // normalised partials errs most on large scores (docs/numerics.md, 1.1 step 3b).
    const RunParams p = params(200);
    for (const KernelUnderTest& k : {v2_kernel("split_kv (chunks rescaled, one division)", split_kernel<Merge::rescaled>),
                                     v2_kernel("split_kv (normalised chunks merged by lse)", split_kernel<Merge::normalised>)})
        for (const char* name : {"agreement", "lse", "split_agreement", "row_sums"}) {
            const PropertyResult r = run_kernel_property(property(name), k, p);
            INFO(report(r, k.name));
            CHECK(r.status == Status::pass);
            CHECK(r.unsupported == 0);
        }
}

TEST_CASE("a narrow declaration: cases stay within it and what is outside is refused", "[properties_v2]") {
    const RunParams p = params(40);
    // The plain kernel refuses nothing it can compute, so it fails refuses_undeclared when it
    // declares less than it accepts; the same declaration passes every other property.
    const KernelUnderTest k = v2_kernel("plain_f32 (declared narrow)", plain_kernel<Bug::none>,
                                        "dtype=f16; window=no; varlen=no; layout=contiguous; block_size=8; max_kv_len=40");
    for (const KernelProperty& prop : kernel_properties()) {
        if (needs_backward(prop)) continue;  // no backward pass
        const PropertyResult r = run_kernel_property(prop, k, p);
        INFO(report(r, k.name));
        if (prop.name == "refuses_undeclared") {
            CHECK(r.status == Status::fail);
            CHECK_THAT(r.message, Catch::Contains("accepted (returned 0) a problem outside its declaration"));
        } else if (prop.name == "batch") {
            CHECK(r.status != Status::fail);  // varlen=no: its cases are outside (not checked, or refused-as-pass)
        } else {
            CHECK(r.status == Status::pass);
        }
    }
}

TEST_CASE("each planted v2 bug fails the property meant for it", "[properties_v2]") {
    const RunParams p = kill_params(100);
    const struct {
        KernelUnderTest kernel;
        const char* property;
        const char* says;
    } planted[] = {
        {v2_kernel("gqa_modulus", plain_kernel<Bug::gqa_modulus>), "gqa_equals_replicated", "replicated"},
        {v2_kernel("gqa_modulus", plain_kernel<Bug::gqa_modulus>), "agreement", "float64 oracle"},
        {v2_kernel("window_2w", plain_kernel<Bug::window_2w>), "agreement", "float64 oracle"},
        {v2_kernel("window_2w", plain_kernel<Bug::window_2w>), "poison_invisible", "garbage in the keys no row sees"},
        {v2_kernel("padding_read", plain_kernel<Bug::padding_read>), "poison_invisible", "padding"},
        {v2_kernel("lse_log2", plain_kernel<Bug::lse_log2>), "lse", "lse"},
        {v2_kernel("write_before", plain_kernel<Bug::write_before>), "no_oob_write", "at 1 element before out"},
        {v2_kernel("decode_tile", plain_kernel<Bug::decode_tile>), "split_agreement", "a decode step"},
        {v2_kernel("contiguous_q", plain_kernel<Bug::contiguous_q>), "layout_invariance", "in layout"},
        {v2_kernel("pages_in_order", plain_kernel<Bug::pages_in_order>), "paged_permutation", "another block permutation"},
        {v2_kernel("softcap_skipped", plain_kernel<Bug::softcap_skipped>), "softcap_bound", "outside [-softcap, softcap]"},
    };
    for (const auto& t : planted) {
        const PropertyResult r = run_kernel_property(property(t.property), t.kernel, p);
        INFO(report(r, t.kernel.name));
        CHECK(r.status == Status::fail);
        CHECK_THAT(r.message, Catch::Contains(t.says));
    }
}

TEST_CASE("a kernel that accepts a malformed problem gets a note, one that refuses it none", "[properties_v2]") {
    const RunParams p = params(30);
    const PropertyResult lax = run_kernel_property(property("refuses_malformed"), v2_kernel("no_checks", plain_kernel<Bug::no_checks>), p);
    INFO(report(lax, "no_checks"));
    CHECK(lax.status == Status::pass);
    CHECK(lax.notes > 0);
    CHECK_THAT(lax.note, Catch::Contains("accepted a malformed problem"));
    const PropertyResult version = run_kernel_property(property("abi_version"), v2_kernel("no_checks", plain_kernel<Bug::no_checks>), p);
    INFO(report(version, "no_checks"));
    CHECK(version.status == Status::fail);
    CHECK_THAT(version.message, Catch::Contains("accepted abi_version"));
    const PropertyResult strict = run_kernel_property(property("refuses_malformed"), v2_kernel("plain", plain_kernel<Bug::none>), p);
    CHECK(strict.status == Status::pass);
    CHECK(strict.notes == 0);
}

TEST_CASE("a kernel that refuses a layout fails layout_invariance unless it declares layout=contiguous", "[properties_v2]") {
    const RunParams p = kill_params(40);
    const PropertyResult undeclared =
        run_kernel_property(property("layout_invariance"), v2_kernel("contiguous_only", plain_kernel<Bug::contiguous_only>), p);
    INFO(report(undeclared, "contiguous_only"));
    CHECK(undeclared.status == Status::fail);
    CHECK_THAT(undeclared.message, Catch::Contains("was refused") && Catch::Contains("within the declaration"));
    const PropertyResult declared = run_kernel_property(
        property("layout_invariance"), v2_kernel("contiguous_only", plain_kernel<Bug::contiguous_only>, "layout=contiguous; varlen=no"), p);
    INFO(report(declared, "contiguous_only, declared"));
    CHECK(declared.status == Status::pass);
    CHECK(declared.unsupported == 0);
}

TEST_CASE("layout=contiguous: varlen cases are densely packed [H,T,D], and no property's case is refused", "[properties_v2]") {
    const RunParams p = params(60);
    const KernelUnderTest k = v2_kernel("reference_v2 (contiguous only)", refusing_reference<0>, kRefusing[0]);
    for (const KernelProperty& prop : kernel_properties()) {
        if (!not_applicable(prop, k.declaration).empty()) continue;  // layout_invariance
        const PropertyResult r = run_kernel_property(prop, k, p);
        INFO(report(r, k.name));
        CHECK(r.status == Status::pass);
        CHECK(r.unsupported == 0);
    }
    const PropertyResult varlen = run_kernel_property(property("batch"), k, p);
    INFO(report(varlen, k.name));
    CHECK(varlen.status == Status::pass);
    CHECK(varlen.cases == p.cases);  // every case drawn (p: RC_PARAMS may set the budget)
    CHECK(varlen.unsupported == 0);
}

TEST_CASE("tanh_ulps=4096 lets a softcap tanh of 12 significant bits pass agreement - undeclared, it fails", "[properties_v2]") {
    const PropertyResult undeclared = run_kernel_property(property("agreement"), v2_kernel("tanh_12_bits", plain_kernel<Bug::tanh_12_bits>), kill_params(100));
    INFO(report(undeclared, "tanh_12_bits"));
    CHECK(undeclared.status == Status::fail);
    CHECK_THAT(undeclared.counterexample, Catch::Contains("softcap="));
    for (const char* name : {"agreement", "softcap_bound", "split_agreement", "batch"}) {
        const PropertyResult declared =
            run_kernel_property(property(name), v2_kernel("tanh_12_bits", plain_kernel<Bug::tanh_12_bits>, "tanh_ulps=4096"), params(100));
        INFO(report(declared, "tanh_12_bits, declared tanh_ulps=4096"));
        CHECK(declared.status == Status::pass);
    }
}

TEST_CASE("a decode-only kernel (max_q_len=1): causality checks single rows with keys after them", "[properties_v2]") {
    const RunParams p = params(60);
    const KernelUnderTest ok = v2_kernel("reference_v2 (max_q_len=1)", refusing_reference<1>, kRefusing[1]);
    const PropertyResult r = run_kernel_property(property("causality"), ok, p);
    INFO(report(r, ok.name));
    CHECK(r.status == Status::pass);
    CHECK(r.unsupported == 0);
    // A decode kernel that lets a row see the keys after its position fails it.
    const PropertyResult bad = run_kernel_property(
        property("causality"), v2_kernel("sees_future", refusing_reference<1, plain_kernel<Bug::sees_future>>, kRefusing[1]), kill_params(60));
    INFO(report(bad, "sees_future, max_q_len=1"));
    CHECK(bad.status == Status::fail);
    CHECK_THAT(bad.message, Catch::Contains("was") && Catch::Contains("now"));
    // Nothing to split in a single row: not applicable by the declaration, and a run of it
    // anyway (as check_kernel does when asked for it by name) says so instead of passing.
    CHECK_THAT(not_applicable(property("split_agreement"), ok.declaration), Catch::Contains("nothing to split"));
    const PropertyResult split = run_kernel_property(property("split_agreement"), ok, p);
    INFO(report(split, ok.name));
    CHECK(split.status == Status::not_applicable);
    CHECK(split.vacuous == split.cases);
    CHECK_THAT(split.message, Catch::Contains("nothing to check on any of the") && Catch::Contains("nothing to split"));
    // A kernel that takes prefills counts only the cases with rows to split.
    const PropertyResult full = run_kernel_property(property("split_agreement"), v2_kernel("reference_v2", attncheck_reference_kernel_v2), p);
    INFO(report(full, "reference_v2"));
    CHECK(full.status == Status::pass);
    CHECK(full.vacuous < full.cases);
    // Bottom-right positions leave no key after a single row: not applicable.
    CHECK_THAT(not_applicable(property("causality"), KernelDeclaration::parse("max_q_len=1; positions=bottom_right")),
               Catch::Contains("max_q_len=1"));
    CHECK(not_applicable(property("causality"), KernelDeclaration::parse("max_q_len=1")).empty());
}

TEST_CASE("softcap_bound stays within a declared value_dim, reading the keys over several calls", "[properties_v2]") {
    const RunParams p = params(60);
    for (const KernelUnderTest& k : {v2_kernel("reference_v2 (value_dim=4..8)", refusing_reference<2>, kRefusing[2]),
                                     v2_kernel("reference_v2 (value_dim=3)", refusing_reference<3>, kRefusing[3])}) {
        const PropertyResult r = run_kernel_property(property("softcap_bound"), k, p);
        INFO(report(r, k.name));
        CHECK(r.status == Status::pass);
        CHECK(r.unsupported == 0);
    }
    const PropertyResult bad = run_kernel_property(
        property("softcap_bound"), v2_kernel("softcap_skipped", refusing_reference<3, plain_kernel<Bug::softcap_skipped>>, kRefusing[3]),
        kill_params(100));
    INFO(report(bad, "softcap_skipped, value_dim=3"));
    CHECK(bad.status == Status::fail);
    CHECK_THAT(bad.message, Catch::Contains("outside [-softcap, softcap]"));
}

// The reference kernel taking only packed variable-length batches, as FlashAttention's varlen
// entry point does.
int varlen_only_reference(const attncheck_problem_v2* p) {
    if (!p->cu_seqlens_q) return 2;
    return attncheck_reference_kernel_v2(p);
}

TEST_CASE("dense=no: a varlen-only kernel passes every property it can be posed and refuses none", "[properties_v2]") {
    const KernelUnderTest k = v2_kernel("reference_v2 (varlen only)", varlen_only_reference, "dense=no");
    for (const KernelProperty& prop : kernel_properties()) {
        const std::string why = not_applicable(prop, k.declaration);
        INFO(prop.name << ": " << why);
        if (needs_backward(prop)) {
            CHECK(why == kNoBackward);
            continue;
        }
        if (prop.name == "layout_invariance" || prop.name == "paged_permutation") {
            CHECK_THAT(why, Catch::Contains("dense=no"));
            continue;
        }
        REQUIRE(why.empty());
        const PropertyResult r = run_kernel_property(prop, k, params(30));
        INFO(report(r, k.name));
        CHECK(r.status == Status::pass);
        CHECK(r.unsupported == 0);
    }
    // Undeclared, most of its cases are refused: what the declaration is for.
    CHECK(run_kernel_property(property("agreement"), v2_kernel("varlen only, undeclared", varlen_only_reference), params(30))
              .unsupported > 0);
}

TEST_CASE("padding_values=finite: a kernel that weighs padding by 0 passes and the report says NaN was not tried", "[properties_v2]") {
    const KernelUnderTest k = v2_kernel("padding_read (padding_values=finite)", plain_kernel<Bug::padding_read>, "padding_values=finite");
    for (const char* name : {"poison_invisible", "agreement", "capacity_invariance"}) {
        const PropertyResult r = run_kernel_property(property(name), k, params(60));
        INFO(report(r, k.name));
        CHECK(r.status == Status::pass);
        if (std::string(name) == "poison_invisible")
            CHECK_THAT(r.warning, Catch::Contains("NaN and Inf were not tried"));
        else
            CHECK(r.warning.empty());
    }
    // Undeclared, the same kernel fails: NaN is what uninitialised padding may hold.
    const PropertyResult undeclared =
        run_kernel_property(property("poison_invisible"), v2_kernel("padding_read", plain_kernel<Bug::padding_read>), kill_params(60));
    CHECK(undeclared.status == Status::fail);
}

TEST_CASE("softcap_bound names a visible key left out as such instead of blaming the softcap", "[properties_v2]") {
    const PropertyResult r = run_kernel_property(property("softcap_bound"), v2_kernel("skips_key0", plain_kernel<Bug::skips_key0>), kill_params(60));
    INFO(report(r, "skips_key0"));
    CHECK(r.status == Status::fail);
    CHECK_THAT(r.message, Catch::Contains("is visible to the row but has probability") &&
                              Catch::Contains("the kernel left it out (masked or skipped it)"));
    CHECK_THAT(r.message, !Catch::Contains("so some score is outside"));
}

TEST_CASE("no_oob_read leaves an inaccurate result to agreement", "[properties_v2]") {
    const KernelUnderTest gqa = v2_kernel("gqa_modulus", plain_kernel<Bug::gqa_modulus>);
    const PropertyResult read = run_kernel_property(property("no_oob_read"), gqa, params(60));
    INFO(report(read, "gqa_modulus"));
    CHECK(read.status == Status::pass);
    CHECK(run_kernel_property(property("agreement"), gqa, kill_params(60)).status == Status::fail);
}

TEST_CASE("a NaN where the other call is finite is named as such, not as a nan or inf ratio", "[properties_v2]") {
    const PropertyResult r = run_kernel_property(property("batch"),
                                                    v2_kernel("nan_in_varlen", plain_kernel<Bug::nan_in_varlen>), kill_params(30));
    INFO(report(r, "nan_in_varlen"));
    CHECK(r.status == Status::fail);
    CHECK_THAT(r.message, Catch::Contains("the candidate is non-finite (NaN) where the float64 oracle is finite"));
    CHECK_THAT(r.message, !Catch::Contains("nanx") && !Catch::Contains("infx") && !Catch::Contains("difference nan"));
}

TEST_CASE("fuzz --list: every property name is followed by at least two spaces", "[properties_v2]") {
    std::ostringstream os;
    print_property_list(os);
    const std::string text = os.str();
    std::vector<std::string> names;
    for (const auto& prop : kernel_properties()) names.push_back(prop.name);
    for (const auto& prop : decoder_properties()) names.push_back(prop.name);
    std::istringstream lines(text);
    std::string line;
    std::size_t listed = 0;
    while (std::getline(lines, line)) {
        if (line.rfind("  ", 0) != 0) continue;
        ++listed;
        const std::size_t end = line.find(' ', 2);
        INFO(line);
        REQUIRE(end != std::string::npos);
        CHECK(std::find(names.begin(), names.end(), line.substr(2, end - 2)) != names.end());
        CHECK(line.compare(end, 2, "  ") == 0);
    }
    CHECK(listed == names.size());
}
