// tests/properties/decoder_declaration_test.cpp — the decoder-level properties of a kernel that
// declares less than the ABI allows (attncheck/declaration.hpp): the decoder's cases are drawn
// within the declaration, a property no such case can serve is "not applicable", a declaration
// that leaves the decoder no call it may make means no decoder-level run, and the decoder reads
// empty rows by the kernel's declared convention through ABI version 2 as through version 1.
// Each kernel here is correct and refuses exactly what it does not declare, so a case outside
// the declaration shows as an unsupported case, and a run of them as NOT CHECKED.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attncheck/check.hpp"
#include "attncheck/declaration.hpp"
#include "attncheck/kernels.hpp"
#include "properties/decoder_case.hpp"
#include "properties/decoder_properties.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/runner.hpp"
#include "reference/attention_v2.hpp"

using attncheck::CheckOptions;
using attncheck::CheckReport;
using attncheck::check_kernel;
using attncheck::KernelDeclaration;
using attncheck::ModelConfig;
using namespace attncheck::properties;

namespace {

// The reference kernel behind a declaration: refuses every problem outside it.
template <const char* Declaration>
int declared_v1(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    static const KernelDeclaration d = KernelDeclaration::parse(Declaration);
    if (p->abi_version == ATTNCHECK_ABI_VERSION && !d.unsupported_reason(*p).empty()) return 3;
    return attncheck_reference_kernel(p, q, k, v, out);
}

template <const char* Declaration>
int declared_v2(const attncheck_problem_v2* p) {
    static const KernelDeclaration d = KernelDeclaration::parse(Declaration);
    if (p->abi_version == ATTNCHECK_ABI_VERSION_2 && p->struct_size == int32_t(sizeof(attncheck_problem_v2)) &&
        !d.unsupported_reason(*p).empty())
        return 3;
    return attncheck_reference_kernel_v2(p);
}

constexpr char kCausalOnly[] = "mask=causal";
constexpr char kWidths[] = "head_dim=64,128; value_dim=same";
constexpr char kNoPadding[] = "padding=no";
constexpr char kSmall[] = "head_dim=2..12; max_heads=2; max_kv_len=10; max_batch=2";
constexpr char kDecodeOnly[] = "max_q_len=1";
constexpr char kMhaNoWindow[] = "gqa=no; window=no";
constexpr char kExactKeys[] = "padding=no; paged=no";

CheckOptions decoder_only(const std::string& declaration, int cases = 30) {
    CheckOptions o;
    o.seed = 20261128;
    o.cases = 1;
    o.decoder_cases = cases;
    o.declaration = declaration;
    for (const auto& p : decoder_properties()) o.only.push_back(p.name);
    return o;
}

// Every decoder-level row of the report ran all its cases within the declaration.
void check_all_supported(const CheckReport& r) {
    INFO(r.text);
    CHECK(r.passed);
    CHECK(r.text.find("NOT CHECKED") == std::string::npos);
    CHECK(r.text.find("unsupported") == std::string::npos);
}

}  // namespace

TEST_CASE("decoder cases stay within a kernel's declared widths, heads, lengths and mask", "[declaration][decoder]") {
    const KernelDeclaration d = KernelDeclaration::parse("head_dim=8,16; max_heads=2; max_kv_len=12; max_q_len=9; mask=causal");
    const KernelDeclaration v2d = KernelDeclaration::parse("gqa=no; window=no");
    int cases = 0, wide = 0;
    const auto gen = gen_decoder_case({}, d, false);
    const auto gen2 = gen_decoder_case({}, v2d, true);
    const PropertyResult r = run_property(
        "within",
        [&] {
            const DecoderCase c = *gen;
            const ModelConfig& m = c.config;
            ++cases;
            wide += m.head_dim() == 16;
            if (!d.allows_head_dim(m.head_dim()) || m.n_heads > 2 || m.max_len > 9 || c.tokens_len > m.max_len ||
                m.cross_attention)
                return Verdict::fail("outside the version 1 declaration: " + describe(c));
            const DecoderCase c2 = *gen2;
            if (c2.config.kv_heads() != c2.config.n_heads || c2.config.attn_window >= 0)
                return Verdict::fail("outside the version 2 declaration: " + describe(c2));
            return Verdict::pass();
        },
        RunParams{3, 200});
    INFO(r.message);
    CHECK(r.status == Status::pass);
    CHECK(wide > 0);
    CHECK(wide < cases);
}

TEST_CASE("a kernel's declaration leaves the decoder-level cases within it, not unsupported", "[declaration][decoder]") {
    SECTION("mask=causal: no cross-attention; memory_padding and the batched step not applicable") {
        const CheckReport r = check_kernel(declared_v1<kCausalOnly>, "causal_only", decoder_only(kCausalOnly));
        check_all_supported(r);
        CHECK(r.text.find("memory_padding: not applicable (declared mask=causal") != std::string::npos);
        CHECK(r.text.find("batch_session: not applicable (declared mask=causal") != std::string::npos);
        CHECK(r.text.find("decoder_agreement") != std::string::npos);
    }
    SECTION("head_dim=64,128; value_dim=same (the documentation's example)") {
        check_all_supported(check_kernel(declared_v1<kWidths>, "widths", decoder_only(kWidths, 12)));
    }
    SECTION("padding=no: the padded batches and the cross-attention not applicable") {
        const CheckReport r = check_kernel(declared_v1<kNoPadding>, "no_padding", decoder_only(kNoPadding));
        check_all_supported(r);
        for (const char* p : {"memory_padding", "decoder_batch", "batch_session"})
            CHECK(r.text.find(std::string(p) + ": not applicable (declared padding=no") != std::string::npos);
    }
    SECTION("small widths, heads, lengths and batches") {
        check_all_supported(check_kernel(declared_v1<kSmall>, "small", decoder_only(kSmall)));
        check_all_supported(check_kernel(declared_v2<kSmall>, "small_v2", decoder_only(kSmall)));
    }
    SECTION("version 2 without grouped heads or windows") {
        check_all_supported(check_kernel(declared_v2<kMhaNoWindow>, "mha_no_window", decoder_only(kMhaNoWindow)));
    }
    SECTION("version 2 without padding or a paged cache: every call with kv_len = the sequence's keys") {
        const CheckReport r = check_kernel(declared_v2<kExactKeys>, "exact_keys", decoder_only(kExactKeys));
        check_all_supported(r);
        CHECK(r.text.find("decoder_batch") != std::string::npos);  // ran: sequences of several lengths
        CHECK(r.text.find("not run") == std::string::npos);
        // Batches and memories too; only the training step's properties are not, for want of a
        // backward pass (none is given here), on their one line.
        std::string text = r.text;
        if (const auto at = text.find(kNoBackwardLine); at != std::string::npos) text.erase(at, text.find('\n', at) - at);
        CHECK(text.find("not applicable") == std::string::npos);
    }
    SECTION("max_q_len=1 (a decode kernel): no decoder-level run, said") {
        const CheckReport r = check_kernel(declared_v2<kDecodeOnly>, "decode_only", decoder_only(kDecodeOnly));
        INFO(r.text);
        CHECK(r.text.find("decoder-level properties: not run (it declares max_q_len=1") != std::string::npos);
        CHECK(r.text.find("decoder_agreement") == std::string::npos);
    }
}

TEST_CASE("the reasons a declaration leaves the decoder no run", "[declaration][decoder]") {
    const auto unavailable = [](const char* text, bool v2) {
        return decoder_unavailable(KernelDeclaration::parse(text), v2);
    };
    CHECK(unavailable("", false).empty());
    CHECK(unavailable("", true).empty());
    CHECK(unavailable("mask=none", false).find("mask=none") != std::string::npos);
    CHECK(unavailable("max_q_len=1", false).find("max_q_len=1") != std::string::npos);
    CHECK(unavailable("max_kv_len=1", true).find("max_kv_len=1") != std::string::npos);
    CHECK(unavailable("max_q_len=2", false).empty());
    CHECK(unavailable("head_dim=8; value_dim=16", false).find("value_dim") != std::string::npos);
    CHECK(unavailable("dtype=bf16", true).find("dtype f32") != std::string::npos);
    CHECK(unavailable("dtype=bf16", false).empty());  // a version 1 kernel is float32 anyway
    CHECK(unavailable("padding=no; paged=no", true).empty());  // a call per sequence, exact kv_len
    CHECK(unavailable("padding=no", true).empty());  // its paged cache passes kv_lens
}

namespace {

// A row of sequence b at absolute position a sees no key of a version 2 problem.
bool row_empty(const attncheck_problem_v2& p, int b, int a) {
    const int tk = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.kv_lens ? p.kv_lens[b] : p.kv_len;
    int lo = p.window_left >= 0 ? std::max(0, a - p.window_left) : 0;
    int hi = tk - 1;
    if (p.causal) hi = std::min(hi, a);
    else if (p.window_right >= 0) hi = std::min(hi, a + p.window_right);
    return lo > hi;
}

// The version 2 reference with PyTorch's convention: NaN on a row with no visible key (float32
// problems only, as the decoder's; it refuses the others).
int nan_rows_v2(const attncheck_problem_v2* p) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION_2 || p->dtype != ATTNCHECK_DTYPE_F32) return 3;
    if (const int rc = attncheck_reference_kernel_v2(p); rc != 0) return rc;
    float* out = static_cast<float*>(p->out.data);
    for (int b = 0; b < p->batch; ++b) {
        const int rows = p->cu_seqlens_q ? p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->q_len;
        for (int i = 0; i < rows; ++i) {
            if (!row_empty(*p, b, p->q_pos[b] + i)) continue;
            const std::int64_t t = p->cu_seqlens_q ? p->cu_seqlens_q[b] + i : i;
            const std::int64_t b0 = p->cu_seqlens_q ? 0 : b;
            for (int h = 0; h < p->q_heads; ++h)
                for (int c = 0; c < p->value_dim; ++c)
                    out[b0 * p->out.stride[0] + h * p->out.stride[1] + t * p->out.stride[2] + c * p->out.stride[3]] =
                        std::numeric_limits<float>::quiet_NaN();
        }
    }
    return 0;
}

}  // namespace

TEST_CASE("empty_rows=nan through ABI version 2: the decoder zeroes such rows as through version 1", "[declaration][decoder]") {
    // A cross-attention memory of valid length 0 gives rows with no visible key.
    CheckOptions o = decoder_only("dtype=f32; empty_rows=nan", 40);
    o.only = {"decoder_agreement", "memory_padding", "batch_session"};
    const CheckReport declared = check_kernel(nan_rows_v2, "nan_rows_v2", o);
    INFO(declared.text);
    CHECK(declared.passed);
    CHECK(declared.text.find("NOT CHECKED") == std::string::npos);

    // Undeclared, the NaN reaches the logits: the decoder does not hide a convention it was not told.
    o.declaration = "dtype=f32";
    const CheckReport undeclared = check_kernel(nan_rows_v2, "nan_rows_v2", o);
    INFO(undeclared.text);
    CHECK_FALSE(undeclared.passed);
}
