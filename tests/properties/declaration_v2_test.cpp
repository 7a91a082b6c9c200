// tests/properties/declaration_v2_test.cpp — the version 2 items of a kernel declaration
// (attncheck/declaration.hpp): parsing, printing back, contradictions, and unsupported_reason()
// on version 2 problems built by the case builder (properties/kernel_case.hpp).
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "attncheck/declaration.hpp"
#include "attncheck/problem_v2.hpp"
#include "properties/kernel_case.hpp"
#include "tests/properties/small_case_v2.hpp"

using attncheck::KernelDeclaration;
using namespace attncheck::properties;

namespace {

// A small well-formed case: B = 2, Hq = 4, Hk = 2, bf16, [B,H,T,D], causal chunk.
KernelCase small_case() {
    KernelCase c = test::small_gqa_case(ATTNCHECK_DTYPE_BF16, 8, 8, /*data_seed=*/7);
    c.q_lens = {3, 3}, c.kv_lens = {5, 5}, c.q_pos = {2, 2};
    c.mode = OffsetMode::chunk;
    return c;
}

std::string reason(const KernelDeclaration& d, const KernelCase& c) {
    const Built b = build_case(c, fill_inputs(c));
    REQUIRE(attncheck::problem_v2_error(b.problem).empty());
    return d.unsupported_reason(b.problem);
}

// The message parse() rejects text with, or "(accepted)".
std::string message(const std::string& text) {
    try {
        KernelDeclaration::parse(text);
    } catch (const std::invalid_argument& e) {
        return std::string(e.what());
    }
    return std::string("(accepted)");
}

}  // namespace

TEST_CASE("v2 declaration items parse and print back", "[declaration][v2]") {
    const KernelDeclaration d = KernelDeclaration::parse(
        "dtype=bf16,f16; gqa=no; layout=contiguous; positions=bottom_right; varlen=no; paged=yes; block_size=16,32; "
        "window=no; softcap=no; alibi=no; lse=no; rounds_probabilities=yes; head_dim=64");
    CHECK(d.to_string() ==
          "head_dim=64; dtype=f16,bf16; gqa=no; layout=contiguous; positions=bottom_right; varlen=no; block_size=16,32; "
          "window=no; softcap=no; alibi=no; lse=no; rounds_probabilities=yes");
    CHECK(KernelDeclaration::parse(d.to_string()).to_string() == d.to_string());
    CHECK_FALSE(d.allows_dtype(ATTNCHECK_DTYPE_F32));
    CHECK(d.allows_dtype(ATTNCHECK_DTYPE_BF16));
    CHECK(d.allows_block_size(32));
    CHECK_FALSE(d.allows_block_size(8));
    CHECK(d.rounds_probabilities);
    CHECK(KernelDeclaration{}.is_default());
    CHECK(KernelDeclaration::parse("dtype=f32,f16,bf16; gqa=yes; paged=yes").is_default());
}

TEST_CASE("malformed or contradictory v2 declarations are rejected, naming the item", "[declaration][v2]") {
    CHECK_THAT(message("dtype="), Catch::Contains("'dtype='") && Catch::Contains("no dtype given"));
    CHECK_THAT(message("dtype=f64"), Catch::Contains("unknown dtype 'f64'"));
    CHECK_THAT(message("gqa=maybe"), Catch::Contains("'gqa=maybe'") && Catch::Contains("yes or no"));
    CHECK_THAT(message("layout=strided"), Catch::Contains("any or contiguous"));
    CHECK_THAT(message("positions=top_left"), Catch::Contains("any, bottom_right or shared"));
    CHECK_THAT(message("block_size=0"), Catch::Contains("not a positive integer"));
    CHECK_THAT(message("paged=no; block_size=16"), Catch::Contains("'block_size=16'") && Catch::Contains("paged=no"));
    CHECK_THAT(message("block_size=16; paged=no"), Catch::Contains("paged=no"));  // whatever the order
    CHECK_THAT(message("sliding=yes"), Catch::Contains("unknown key 'sliding'") && Catch::Contains("window"));
    // A later apply() (command-line flags on top of a library's declaration) is checked too.
    KernelDeclaration d = KernelDeclaration::parse("block_size=16");
    CHECK_THROWS_WITH(d.apply("paged=no"), Catch::Contains("paged=no"));
}

TEST_CASE("tanh_ulps: the softcap tanh's accuracy, parsed, printed back and validated", "[declaration][v2]") {
    CHECK(KernelDeclaration{}.tanh_ulps == 2);
    const KernelDeclaration d = KernelDeclaration::parse("softcap=yes; tanh_ulps=4096");
    CHECK(d.tanh_ulps == 4096);
    CHECK_FALSE(d.is_default());
    CHECK(d.to_string() == "tanh_ulps=4096");
    CHECK(KernelDeclaration::parse(d.to_string()).tanh_ulps == 4096);
    CHECK(KernelDeclaration::parse("tanh_ulps=2").is_default());  // the default says nothing
    CHECK_THAT(message("tanh_ulps=0"), Catch::Contains("'tanh_ulps=0'") && Catch::Contains("not a positive integer"));
    CHECK_THAT(message("tanh_ulps=abc"), Catch::Contains("'tanh_ulps=abc'") && Catch::Contains("not a positive integer"));
    CHECK_THAT(message("tanh_ulps=-4"), Catch::Contains("'tanh_ulps=-4'"));
    CHECK_THAT(message("tanh_ulp=4"), Catch::Contains("unknown key") && Catch::Contains("tanh_ulps"));
}

TEST_CASE("dense: parsed, printed back, validated against varlen=no, and a dense problem refused", "[declaration][v2]") {
    const KernelDeclaration d = KernelDeclaration::parse("dense=no");
    CHECK_FALSE(d.dense);
    CHECK(d.to_string() == "dense=no");
    CHECK_FALSE(KernelDeclaration::parse(d.to_string()).dense);
    CHECK(KernelDeclaration::parse("dense=yes").is_default());
    CHECK_THAT(message("dense=no; varlen=no"), Catch::Contains("dense=no") && Catch::Contains("varlen=no"));
    CHECK_THAT(reason(d, small_case()), Catch::Contains("declared dense=no"));
}

TEST_CASE("padding_values: parsed, printed back and validated", "[declaration][v2]") {
    CHECK_FALSE(KernelDeclaration{}.padding_finite);
    const KernelDeclaration d = KernelDeclaration::parse("padding_values=finite");
    CHECK(d.padding_finite);
    CHECK(d.to_string() == "padding_values=finite");
    CHECK(KernelDeclaration::parse(d.to_string()).padding_finite);
    CHECK(KernelDeclaration::parse("padding_values=any").is_default());
    CHECK_THAT(message("padding_values=zero"), Catch::Contains("'padding_values=zero'") && Catch::Contains("any or finite"));
}

TEST_CASE("unsupported_reason names the v2 feature a problem uses and the kernel does not declare", "[declaration][v2]") {
    const KernelCase c = small_case();
    CHECK(reason(KernelDeclaration{}, c).empty());
    CHECK_THAT(reason(KernelDeclaration::parse("dtype=f32,f16"), c), Catch::Contains("dtype bf16"));
    CHECK_THAT(reason(KernelDeclaration::parse("gqa=no"), c), Catch::Contains("gqa=no"));
    CHECK(reason(KernelDeclaration::parse("layout=contiguous"), c).empty());  // bhtd, capacity = Tk
    CHECK_THAT(reason(KernelDeclaration::parse("layout=contiguous"), with_layout(c, LayoutKind::bthd)),
               Catch::Contains("layout=contiguous"));
    CHECK_THAT(reason(KernelDeclaration::parse("layout=contiguous"), with_layout(c, LayoutKind::gapped)),
               Catch::Contains("layout=contiguous"));
    CHECK(reason(KernelDeclaration::parse("positions=bottom_right"), c).empty());  // q_pos = Tk - Tq
    KernelCase general = c;
    general.q_pos = {0, 2};
    CHECK_THAT(reason(KernelDeclaration::parse("positions=bottom_right"), general), Catch::Contains("q_pos[0] = 0"));
    CHECK_THAT(reason(KernelDeclaration::parse("varlen=no"), with_layout(c, LayoutKind::varlen)), Catch::Contains("varlen=no"));
    // varlen: [T,H,D] with gaps is not contiguous, densely packed [H,T,D] (lse [H,T]) is.
    KernelCase packed = with_layout(c, LayoutKind::varlen);
    packed.want_lse = true;
    CHECK_THAT(reason(KernelDeclaration::parse("layout=contiguous"), packed), Catch::Contains("layout=contiguous"));
    packed.layout.varlen_contiguous = true;
    CHECK(reason(KernelDeclaration::parse("layout=contiguous"), packed).empty());
    CHECK_THAT(reason(KernelDeclaration::parse("paged=no"), with_pages(c, 4, 1, 0, 0)), Catch::Contains("paged=no"));
    CHECK_THAT(reason(KernelDeclaration::parse("block_size=16"), with_pages(c, 4, 1, 0, 0)), Catch::Contains("block_size 4"));
    CHECK(reason(KernelDeclaration::parse("block_size=4"), with_pages(c, 4, 1, 0, 0)).empty());
    KernelCase w = c;
    w.window_left = 1;
    CHECK_THAT(reason(KernelDeclaration::parse("window=no"), w), Catch::Contains("window=no"));
    KernelCase s = c;
    s.softcap = 5;
    CHECK_THAT(reason(KernelDeclaration::parse("softcap=no"), s), Catch::Contains("softcap=no"));
    KernelCase a = c;
    a.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
    CHECK_THAT(reason(KernelDeclaration::parse("alibi=no"), a), Catch::Contains("alibi=no"));
    KernelCase l = c;
    l.want_lse = true;
    CHECK_THAT(reason(KernelDeclaration::parse("lse=no"), l), Catch::Contains("lse=no"));
    // v1 items read per sequence: the longest sequence's keys against max_kv_len.
    KernelCase longer = c;
    longer.kv_lens = {5, 9};
    longer.q_pos = {2, 6};
    CHECK_THAT(reason(KernelDeclaration::parse("max_kv_len=8"), longer), Catch::Contains("9 keys > max_kv_len=8"));
    CHECK_THAT(reason(KernelDeclaration::parse("padding=no"), longer), Catch::Contains("padding=no"));
    CHECK(reason(KernelDeclaration::parse("padding=no"), c).empty());
}

TEST_CASE("backward, deterministic_backward: parsed, printed back, and set_backward follows them", "[declaration][v2][backward]") {
    KernelDeclaration d = KernelDeclaration::parse("deterministic_backward=no");
    CHECK_FALSE(d.deterministic_backward);
    CHECK(d.to_string() == "deterministic_backward=no");
    CHECK_FALSE(d.backward);  // not an item: set where the kernel is loaded
    d.set_backward(true);
    CHECK(d.backward);
    d.set_backward(false);
    CHECK_FALSE(d.backward);

    KernelDeclaration off = KernelDeclaration::parse("backward=no");
    CHECK(off.backward_said == KernelDeclaration::Said::no);
    off.set_backward(true);  // exported, but declared not to be checked
    CHECK_FALSE(off.backward);
    CHECK(KernelDeclaration::parse(off.to_string()).backward_said == KernelDeclaration::Said::no);
    CHECK(KernelDeclaration::parse("backward=yes").to_string() == "backward=yes");

    CHECK_THAT(message("backward=maybe"), Catch::Contains("backward=maybe"));
    // A version 1 kernel has no backward entry point, whatever it says.
    KernelDeclaration v1 = KernelDeclaration::parse("");
    v1.set_backward(true);
    v1.limit_to_abi_v1();
    CHECK_FALSE(v1.backward);
}
