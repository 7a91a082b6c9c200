// tests/properties/declaration_test.cpp — kernel declarations (attncheck/declaration.hpp): the
// parser, and correct kernels with conventions other than the ABI's, checked with and without
// declaring them (NUMERICS.md "What a kernel may declare").
#include <catch2/catch.hpp>

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attncheck/check.hpp"
#include "attncheck/declaration.hpp"
#include "attncheck/kernels.hpp"
#include "reference/attention.hpp"

using attncheck::CheckOptions;
using attncheck::CheckReport;
using attncheck::check_kernel;
using attncheck::KernelDeclaration;

TEST_CASE("a declaration parses, prints back, and names what it does not support", "[declaration]") {
    const KernelDeclaration d =
        KernelDeclaration::parse(" head_dim = 64,128 ; value_dim=same; max_kv_len=4096;mask=causal;empty_rows=nan;deterministic=no");
    CHECK(d.to_string() == "head_dim=64,128; value_dim=same; max_kv_len=4096; mask=causal; empty_rows=nan; deterministic=no");
    CHECK(KernelDeclaration::parse(d.to_string()).to_string() == d.to_string());
    CHECK(d.empty_rows_nan);
    CHECK_FALSE(d.deterministic);
    CHECK(d.allows_head_dim(64));
    CHECK_FALSE(d.allows_head_dim(65));
    CHECK(d.allows_value_dim(128, 128));
    CHECK_FALSE(d.allows_value_dim(64, 128));

    attncheck_problem p{};
    p.abi_version = ATTNCHECK_ABI_VERSION;
    p.batch = p.heads = p.q_len = p.kv_len = 1;
    p.head_dim = p.value_dim = 64;
    p.causal = 1;
    CHECK(d.unsupported_reason(p).empty());
    p.head_dim = 48;
    CHECK(d.unsupported_reason(p) == "head_dim 48 is not declared (head_dim=64,128)");
    p.head_dim = 64;
    p.causal = 0;
    CHECK(d.unsupported_reason(p) == "a non-causal problem, declared mask=causal");
    p.causal = 1;
    p.kv_len = 4097;
    CHECK(d.unsupported_reason(p) == "kv_len 4097 > max_kv_len=4096");

    const KernelDeclaration ranges = KernelDeclaration::parse("head_dim=8..64,96");
    CHECK(ranges.allows_head_dim(8));
    CHECK(ranges.allows_head_dim(40));
    CHECK(ranges.allows_head_dim(96));
    CHECK_FALSE(ranges.allows_head_dim(65));
    CHECK(KernelDeclaration{}.is_default());
    CHECK(KernelDeclaration::parse("").is_default());
    CHECK(KernelDeclaration::parse("empty_rows=zero; deterministic=yes; mask=any; padding=yes").is_default());
}

TEST_CASE("a malformed declaration is an error that names the item", "[declaration]") {
    const auto message = [](const std::string& text) {
        try {
            (void)KernelDeclaration::parse(text);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    CHECK(message("head_dim=0") == "declaration item 'head_dim=0': '0' is not a positive integer");
    CHECK(message("head_dim=64..32") == "declaration item 'head_dim=64..32': range 64..32 is empty");
    CHECK(message("empty_rows=inf") == "declaration item 'empty_rows=inf': expected zero or nan, got 'inf'");
    CHECK(message("deterministic") == "declaration item 'deterministic': expected key=value");
    CHECK(message("heads=2").find("unknown key 'heads'") != std::string::npos);
    CHECK(message("max_kv_len=-3") == "declaration item 'max_kv_len=-3': '-3' is not a positive integer");
    CheckOptions o;
    o.declaration = "mask=sometimes";
    CHECK_THROWS_AS(check_kernel(attncheck_reference_kernel, "reference", o), std::invalid_argument);
}

namespace {

// The reference kernel with PyTorch's convention: a row with no visible key gives NaN.
int nan_rows_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    const int rc = attncheck_reference_kernel(p, q, k, v, out);
    if (rc != 0 || !p->kv_valid_len) return rc;
    const std::size_t per_b = std::size_t(p->heads) * std::size_t(p->q_len) * std::size_t(p->value_dim);
    for (int b = 0; b < p->batch; ++b)
        if (p->kv_valid_len[b] == 0)
            std::fill_n(out + std::size_t(b) * per_b, per_b, std::numeric_limits<float>::quiet_NaN());
    return rc;
}

// The same with NaN only in the first element of an empty row: not the declared convention.
int half_nan_rows_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    const int rc = attncheck_reference_kernel(p, q, k, v, out);
    if (rc != 0 || !p->kv_valid_len) return rc;
    const std::size_t per_b = std::size_t(p->heads) * std::size_t(p->q_len) * std::size_t(p->value_dim);
    for (int b = 0; b < p->batch; ++b)
        if (p->kv_valid_len[b] == 0) out[std::size_t(b) * per_b] = std::numeric_limits<float>::quiet_NaN();
    return rc;
}

// Supports head_dim 8 and 16 only, and refuses the rest: a kernel with fixed-width code paths.
int dims_8_16_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->head_dim != 8 && p->head_dim != 16) return 3;
    return attncheck_reference_kernel(p, q, k, v, out);
}

// The float32 textbook evaluation (reference::attention<float>) on the problems the reference
// kernel accepts: float32 sums, whose order shows in their bits (the reference kernel's float64
// sums rounded to float32 seldom show it).
int float32_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (const int rc = attncheck_reference_kernel(p, q, k, v, out); rc != ATTNCHECK_OK) return rc;
    const std::vector<float> result = attncheck::reference::attention<float>(*p, q, k, v);
    std::copy(result.begin(), result.end(), out);
    return ATTNCHECK_OK;
}

// The float32 evaluation of the same problem with the dot products' columns reversed: the same
// exact scores, summed in the reverse order (other bits, within the bound).
int reversed_columns_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    const std::size_t Dk = std::size_t(p->head_dim);
    std::vector<float> qr(q, q + std::size_t(p->batch) * p->heads * p->q_len * Dk);
    std::vector<float> kr(k, k + std::size_t(p->batch) * p->heads * p->kv_len * Dk);
    for (auto* x : {&qr, &kr})
        for (std::size_t r = 0; r < x->size(); r += Dk) std::reverse(x->begin() + std::ptrdiff_t(r), x->begin() + std::ptrdiff_t(r + Dk));
    return float32_kernel(p, qr.data(), kr.data(), v, out);
}

// Correct, but sums alternate calls in another order: not bitwise repeatable (as a kernel with
// atomics or a split chosen at run time is).
int alternating_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    static std::atomic<unsigned> calls{0};
    if (calls++ % 2 == 0) return float32_kernel(p, q, k, v, out);
    return reversed_columns_kernel(p, q, k, v, out);
}

// Correct on one thread; on more, the columns reversed: a result that depends on the thread
// count, as one split by threads does.
int thread_count_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (omp_get_max_threads() == 1) return float32_kernel(p, q, k, v, out);
    return reversed_columns_kernel(p, q, k, v, out);
}

CheckOptions options(const std::string& declaration, int cases = 60) {
    CheckOptions o;
    o.seed = 20240611;
    o.cases = cases;
    o.decoder_cases = 6;
    o.declaration = declaration;
    return o;
}

bool failed(const CheckReport& r, const std::string& property) {
    return std::find(r.failed.begin(), r.failed.end(), property) != r.failed.end();
}

// `kernel` passes the check under `o` and refuses none of its cases: all are within the declaration.
void passes_refusing_nothing(attncheck_kernel_fn kernel, const char* name, const CheckOptions& o) {
    const CheckReport r = check_kernel(kernel, name, o);
    INFO(r.text);
    CHECK(r.passed);
    CHECK(r.text.find("unsup") == std::string::npos);
}

// `kernel` fails `property` under `o`, and the report says `why`.
void fails_saying(attncheck_kernel_fn kernel, const char* name, const CheckOptions& o, const std::string& property,
                  const std::string& why) {
    const CheckReport r = check_kernel(kernel, name, o);
    INFO(r.text);
    CHECK(failed(r, property));
    CHECK(r.text.find(why) != std::string::npos);
}

}  // namespace

TEST_CASE("empty_rows=nan: a NaN-convention kernel passes everything once declared", "[declaration]") {
    const CheckReport declared = check_kernel(nan_rows_kernel, "nan_rows", options("empty_rows=nan"));
    INFO(declared.text);
    CHECK(declared.passed);
    CHECK(declared.text.find("declared: empty_rows=nan") != std::string::npos);

    fails_saying(nan_rows_kernel, "nan_rows", options(""), "empty_rows", "declares empty_rows=nan");

    // Declared NaN but returns 0 (the reference kernel): the declaration is wrong, and says so.
    CheckOptions only = options("empty_rows=nan");
    only.only = {"empty_rows"};
    fails_saying(attncheck_reference_kernel, "reference", only, "empty_rows", "but the kernel declares empty_rows=nan");

    // A NaN convention does not hide anything else: NaN in part of a row is still wrong.
    const CheckReport half = check_kernel(half_nan_rows_kernel, "half_nan_rows", only);
    INFO(half.text);
    CHECK(failed(half, "empty_rows"));
}

TEST_CASE("head_dim declared: the cases are supported ones, and undeclared problems must be refused",
          "[declaration]") {
    CheckOptions o = options("head_dim=8,16");
    o.decoder = false;
    passes_refusing_nothing(dims_8_16_kernel, "dims_8_16", o);

    // The reference kernel declared head_dim=8,16 accepts head_dim 9: the declaration is false.
    o.only = {"refuses_undeclared"};
    fails_saying(attncheck_reference_kernel, "reference", o, "refuses_undeclared",
                 "accepted (returned 0) a problem outside its declaration");
}

TEST_CASE("deterministic=no: bitwise repeatability is not demanded, agreement still is", "[declaration]") {
    CheckOptions o = options("deterministic=no");
    const CheckReport declared = check_kernel(alternating_kernel, "alternating", o);
    INFO(declared.text);
    CHECK(declared.passed);

    o.declaration = "";
    o.decoder = false;
    o.only = {"determinism"};
    fails_saying(alternating_kernel, "alternating", o, "determinism", "declares deterministic=no");
}

TEST_CASE("determinism compares two thread counts, on a process of one thread too", "[declaration]") {
    // An `attncheck fuzz --jobs N` worker on N cores runs one OpenMP thread: determinism then
    // calls the kernel again on 2 (properties/thread_counts.hpp), not on 1 again.
    CheckOptions o = options("");
    o.decoder = false;
    o.only = {"determinism"};
    const int threads = omp_get_max_threads();
    for (const int process : {std::max(threads, 2), 1}) {
        omp_set_num_threads(process);
        INFO("a process of " << process << " threads");
        fails_saying(thread_count_kernel, "thread_count", o, "determinism",
                     process == 1 ? "on 2 threads instead of 1" : "on 1 thread instead of " + std::to_string(process));
    }
    omp_set_num_threads(threads);
}

namespace {

// The reference kernel without padding: refuses every problem with kv_valid_len (declared
// padding=no, it is correct).
int no_padding_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->kv_valid_len != nullptr) return 1;
    return attncheck_reference_kernel(p, q, k, v, out);
}

// Non-causal problems of one sequence, no padding: declared "padding=no; mask=none; max_batch=1".
int plain_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->kv_valid_len != nullptr || p->causal || p->batch > 1) return 1;
    return attncheck_reference_kernel(p, q, k, v, out);
}

// head_dim 8 or 16 and value_dim = head_dim only: declared "head_dim=8,16; value_dim=same".
int same_dims_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if ((p->head_dim != 8 && p->head_dim != 16) || p->value_dim != p->head_dim) return 1;
    return attncheck_reference_kernel(p, q, k, v, out);
}

// The same, but a causal row also sees the key just after its position: a one-key peek into
// the future, which the probabilities show as a masked key with a nonzero weight.
int same_dims_peek_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if ((p->head_dim != 8 && p->head_dim != 16) || p->value_dim != p->head_dim) return 1;
    attncheck_problem peek = *p;
    if (peek.causal) peek.q_offset += 1;
    return attncheck_reference_kernel(&peek, q, k, v, out);
}

// Declared "max_kv_len=1000000; max_q_len=1000000; max_batch=100000; max_heads=100000", and
// refuses past those at once (without reading its inputs).
int large_limits_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->kv_len > 1000000 || p->q_len > 1000000 || p->batch > 100000 || p->heads > 100000) return 1;
    return attncheck_reference_kernel(p, q, k, v, out);
}

// The peak resident memory of this process so far, in MiB.
double peak_rss_mib() {
    struct rusage u {};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

}  // namespace

TEST_CASE("padding=no, mask=none, max_batch=1: the properties that need them are not applicable, not unchecked",
          "[declaration]") {
    CheckOptions o = options("padding=no");
    o.decoder = false;
    const CheckReport r = check_kernel(no_padding_kernel, "no_padding", o);
    INFO(r.text);
    CHECK(r.passed);
    CHECK(r.text.find("NOT CHECKED") == std::string::npos);
    CHECK(r.text.find("  empty_rows: not applicable (declared padding=no: every row sees key 0)\n") != std::string::npos);
    CHECK_FALSE(failed(r, "empty_rows"));

    o.declaration = "padding=no; mask=none; max_batch=1";
    const CheckReport plain = check_kernel(plain_kernel, "plain", o);
    INFO(plain.text);
    CHECK(plain.passed);
    CHECK(plain.text.find("NOT CHECKED") == std::string::npos);
    CHECK(plain.text.find("  causality: not applicable (declared mask=none)\n") != std::string::npos);
    CHECK(plain.text.find("  batch: not applicable (declared max_batch=1: the property needs a batch of 2 sequences)\n") !=
          std::string::npos);

    // Selected alone, a property that is not applicable runs nothing: the check says so.
    o.only = {"empty_rows"};
    o.declaration = "padding=no";
    const CheckReport alone = check_kernel(no_padding_kernel, "no_padding", o);
    INFO(alone.text);
    CHECK_FALSE(alone.passed);
    CHECK(alone.text.find("empty_rows: not applicable") != std::string::npos);
    CHECK(alone.text.find("no property selected: nothing was checked") != std::string::npos);
}

TEST_CASE("probabilities: read within a declared value_dim (value_dim=same) in several calls", "[declaration]") {
    CheckOptions o = options("head_dim=8,16; value_dim=same");
    o.decoder = false;
    o.only = {"probabilities"};
    passes_refusing_nothing(same_dims_kernel, "same_dims", o);

    // Read in pieces, the matrix still shows a weight on a masked key.
    fails_saying(same_dims_peek_kernel, "same_dims_peek", o, "probabilities", "is masked for this row: must be exactly 0");
}

TEST_CASE("refuses_undeclared: a large declared limit is probed without filling a problem of that size",
          "[declaration]") {
    CheckOptions o = options("max_kv_len=1000000; max_q_len=1000000; max_batch=100000; max_heads=100000");
    o.decoder = false;
    o.only = {"refuses_undeclared"};
    // Filled, the problems past these limits would take GBs (kv_len 1000001 with Dk, Dv up to 128,
    // q_len 1000001 in prefill): sent as unwritten memory, a kernel that refuses costs nothing.
    const double before = peak_rss_mib();
    const CheckReport r = check_kernel(large_limits_kernel, "large_limits", o);
    const double grown = peak_rss_mib() - before;
    INFO(r.text);
    INFO("peak resident memory grew by " << grown << " MiB");
    CHECK(r.passed);
    CHECK(grown < 256.0);

    // A kernel that declares max_kv_len=1000000 and accepts more still fails, on a problem past it.
    o.declaration = "max_kv_len=1000000";
    fails_saying(attncheck_reference_kernel, "reference", o, "refuses_undeclared",
                 "accepted (returned 0) a problem outside its declaration: a sequence of 1000001 keys > max_kv_len=1000000");
}
