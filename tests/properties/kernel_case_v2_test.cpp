// tests/properties/kernel_case_v2_test.cpp — version 2 cases (properties/kernel_case.hpp): the
// generator stays within the ABI and the declaration, every layout holds the same logical
// numbers, unread elements are poisoned, out/lse guards catch stray writes, the guard page
// catches an over-read, and the transforms keep the logical problem.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <string>
#include <vector>

#include "attncheck/declaration.hpp"
#include "attncheck/problem_v2.hpp"
#include "properties/kernel_case.hpp"
#include "properties/runner.hpp"
#include "tests/properties/ci_params.hpp"
#include "tests/properties/small_case_v2.hpp"

using attncheck::KernelDeclaration;
using namespace attncheck;
using namespace attncheck::properties;

namespace {

// Every logical element of q, k, v as the built problem addresses it.
void require_same_logical(const KernelCase& c, const KernelInputs& in, const Built& b) {
    const attncheck_problem_v2& p = b.problem;
    for (int s = 0; s < c.batch; ++s) {
        REQUIRE(q_len_of(p, s) == c.q_lens[std::size_t(s)]);
        REQUIRE(kv_len_of(p, s) == c.kv_lens[std::size_t(s)]);
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(s)]; ++i)
                for (int col = 0; col < c.head_dim; ++col)
                    REQUIRE(load_element(p.dtype, p.q.data, q_offset_v2(p, p.q, s, h, i, col)) == in.q_at(s, h, i, col, c));
        for (int h = 0; h < c.kv_heads; ++h)
            for (int j = 0; j < c.kv_lens[std::size_t(s)]; ++j) {
                for (int col = 0; col < c.head_dim; ++col)
                    REQUIRE(load_element(p.dtype, p.k.data, kv_offset_v2(p, p.k, s, h, j, col)) == in.k_at(s, h, j, col, c));
                for (int col = 0; col < c.value_dim; ++col)
                    REQUIRE(load_element(p.dtype, p.v.data, kv_offset_v2(p, p.v, s, h, j, col)) == in.v_at(s, h, j, col, c));
            }
    }
}

KernelCase small_case(LayoutKind kind) {
    KernelCase c = test::small_gqa_case(ATTNCHECK_DTYPE_F16, 5, 3, /*data_seed=*/11);
    c.q_lens = {2, 2}, c.kv_lens = {6, 3}, c.q_pos = {4, 1};
    c.want_lse = true;
    c.layout.kind = kind;
    c.layout.kv_capacity = 8;
    c.layout.block_size = 4;
    c.layout.spare_blocks = 2;
    c.layout.table_slack = 1;
    c.layout.block_seed = 3;
    return c;
}

// Writes every element of out and lse through the problem's strides, each a value naming its
// place: out (b, h, i, c) = 100 b + 10 h + i + c, lse (b, h, i) = -(100 b + 10 h + i).
void write_every_output(const attncheck_problem_v2& p) {
    for (int s = 0; s < p.batch; ++s)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, s); ++i) {
                for (int col = 0; col < p.value_dim; ++col)
                    store_element(p.dtype, p.out.data, q_offset_v2(p, p.out, s, h, i, col), float(100 * s + 10 * h + i + col));
                p.lse[lse_offset_v2(p, s, h, i)] = float(-(100 * s + 10 * h + i));
            }
}

}  // namespace

TEST_CASE("generated v2 cases are well formed, and within a declaration", "[case_v2]") {
    const KernelDeclaration any;
    const KernelDeclaration narrow = KernelDeclaration::parse(
        "dtype=bf16; gqa=no; layout=contiguous; positions=bottom_right; varlen=no; block_size=4,8; window=no; softcap=no; "
        "alibi=no; lse=no; head_dim=8,16; value_dim=same; mask=causal; max_kv_len=40; max_q_len=24");
    // At the CI seed (ci_params.hpp), through the runner the properties use.
    const auto well_formed = [](const CaseOptions& o, const KernelDeclaration& d) {
        const rc::Gen<KernelCase> gen = gen_kernel_case(o, d);
        const PropertyResult r = run_property(
            "generated cases",
            [&] {
                const KernelCase c = *gen.as("case");
                const Built b = build_case(c, fill_inputs(c));
                if (const std::string e = problem_v2_error(b.problem); !e.empty()) return Verdict::fail("malformed: " + e);
                if (const std::string e = d.unsupported_reason(b.problem); !e.empty()) return Verdict::fail("undeclared: " + e);
                return Verdict::pass();
            },
            test::ci_params(200));
        INFO(r.counterexample + "\n" + r.message);
        CHECK(r.status == Status::pass);
    };
    well_formed({}, any);
    well_formed({}, narrow);
    well_formed({.need_gqa = true}, any);
    well_formed({.need_paged = true}, narrow);
    well_formed({.need_invisible = true}, narrow);
    well_formed({.need_prefill = true, .large_percent = 50}, narrow);
    well_formed({.need_causal_future = true, .large_percent = 50}, narrow);
    well_formed({.need_varlen = true}, any);
    well_formed({.need_lse = true}, any);
    well_formed({.need_empty = true}, any);
    well_formed({.need_prefill = true, .large_percent = 50}, any);
    well_formed({.need_invisible = true}, any);
    well_formed({.need_softcap = true}, any);
    well_formed({.need_causal_future = true}, any);
    // layout=contiguous with varlen: the packed batch densely packed [H,T,D], not refused.
    const KernelDeclaration contiguous = KernelDeclaration::parse("layout=contiguous");
    well_formed({.need_varlen = true}, contiguous);
    well_formed({.need_varlen = true, .need_lse = true}, contiguous);
    well_formed({}, contiguous);
    well_formed({.need_paged = true}, contiguous);
    // A decode-only kernel (max_q_len=1): causality's cases are single query rows.
    well_formed({.need_causal_future = true}, KernelDeclaration::parse("max_q_len=1"));
    // value_dim declared: softcap's cases within it.
    well_formed({.need_softcap = true}, KernelDeclaration::parse("value_dim=4..8"));
}

TEST_CASE("causality's cases of a decode-only kernel have keys after the query row", "[case_v2]") {
    const rc::Gen<KernelCase> gen = gen_kernel_case({.need_causal_future = true}, KernelDeclaration::parse("max_q_len=1"));
    const PropertyResult r = run_property(
        "decode cases with future keys",
        [&] {
            const KernelCase c = *gen.as("case");
            if (!c.causal) return Verdict::fail("not causal");
            bool future = false;
            for (int b = 0; b < c.batch; ++b) {
                if (c.q_lens[std::size_t(b)] != 1) return Verdict::fail("Tq(b) != 1");
                future = future || c.q_pos[std::size_t(b)] < c.kv_lens[std::size_t(b)] - 1;
            }
            return future ? Verdict::pass() : Verdict::fail("no key after the query row");
        },
        test::ci_params(200));
    INFO(r.counterexample + "\n" + r.message);
    CHECK(r.status == Status::pass);
}

TEST_CASE("every layout holds the same logical numbers, and unread elements are poison", "[case_v2]") {
    for (const LayoutKind kind : {LayoutKind::bhtd, LayoutKind::bthd, LayoutKind::gapped, LayoutKind::varlen, LayoutKind::paged}) {
        CAPTURE(to_string(kind));
        const KernelCase c = small_case(kind);
        const KernelInputs in = fill_inputs(c);
        const Built b = build_case(c, in);
        REQUIRE(problem_v2_error(b.problem) == "");
        require_same_logical(c, in, b);
        // k has poison: padding rows (dense), gaps, unused blocks or rows of the last block.
        const std::size_t n = b.k_bytes.size() / 2;
        std::size_t poisoned = 0;
        for (std::size_t i = 0; i < n; ++i) poisoned += std::isnan(load_element(c.dtype, b.k_bytes.data(), std::int64_t(i)));
        CHECK(poisoned > 0);
        // Nothing written yet: every out/lse element unwritten, no stray write.
        CHECK_THAT(b.unwritten(), Catch::Contains("was never written"));
        CHECK(b.write_outside().empty());
        CHECK(b.input_change().empty());
    }
}

TEST_CASE("a contiguous varlen batch is densely packed [H,T,D], lse [H,T], and holds the same numbers", "[case_v2]") {
    KernelCase c = small_case(LayoutKind::varlen);
    c.layout.varlen_contiguous = true;
    const KernelInputs in = fill_inputs(c);
    Built b = build_case(c, in);
    attncheck_problem_v2& p = b.problem;
    REQUIRE(problem_v2_error(p) == "");
    require_same_logical(c, in, b);
    const std::int64_t q_rows = 2 + 2, k_rows = 6 + 3;
    CHECK(p.q.stride[3] == 1);
    CHECK(p.q.stride[2] == 5);
    CHECK(p.q.stride[1] == q_rows * 5);
    CHECK(p.out.stride[2] == 3);
    CHECK(p.out.stride[1] == q_rows * 3);
    CHECK(p.k.stride[2] == 5);
    CHECK(p.k.stride[1] == k_rows * 5);
    CHECK(p.v.stride[1] == k_rows * 3);
    CHECK(p.lse_stride[2] == 1);
    CHECK(p.lse_stride[1] == q_rows);
    CHECK(b.k_bytes.size() / 2 == std::size_t(2 * k_rows * 5));  // no gap, nothing unaddressed
    CHECK(b.out_span == std::size_t(4 * q_rows * 3));
    CHECK(KernelDeclaration::parse("layout=contiguous").unsupported_reason(p).empty());
    write_every_output(p);
    CHECK(b.unwritten().empty());
    CHECK(b.write_outside().empty());
    const std::size_t row = b.first_row[1] + 5;  // (b=1, h=2, i=1)
    CHECK(b.out_logical()[row * 3 + 2] == 100 + 20 + 1 + 2);
    CHECK(b.lse_logical()[row] == -(100 + 20 + 1));
    CHECK_THAT(describe(c), Catch::Contains("layout=varlen(contiguous [H,T,D])"));
}

TEST_CASE("out and lse read back in logical order, and writes outside them are named", "[case_v2]") {
    for (const LayoutKind kind : {LayoutKind::bthd, LayoutKind::gapped, LayoutKind::varlen}) {
        CAPTURE(to_string(kind));
        const KernelCase c = small_case(kind);
        Built b = build_case(c, fill_inputs(c));
        attncheck_problem_v2& p = b.problem;
        write_every_output(p);
        CHECK(b.unwritten().empty());
        CHECK(b.write_outside().empty());
        const std::vector<float> out = b.out_logical(), lse = b.lse_logical();
        REQUIRE(b.rows() == std::size_t(2 * 4 * 2));
        // Row (b=1, h=2, i=1) is first_row[1] + 2 * 2 + 1.
        const std::size_t row = b.first_row[1] + 5;
        CHECK(out[row * 3 + 2] == 100 + 20 + 1 + 2);
        CHECK(lse[row] == -(100 + 20 + 1));
        CHECK(b.element(row, 2) == "[1,2,1,2]");
        // One element past the end of out, and one in a gap (the gapped layout has them).
        store_element(p.dtype, p.out.data, std::int64_t(b.out_span), 1.0f);
        CHECK_THAT(b.write_outside(), Catch::Contains("at 1 element past the end of out"));
        b.reset_outputs();
        CHECK(b.write_outside().empty());
        if (kind != LayoutKind::bthd) {
            store_element(p.dtype, p.out.data, p.out.stride[2] - 1, 2.0f);  // after row 0's last column
            CHECK_THAT(b.write_outside(), Catch::Contains("a gap between the elements of out"));
        }
        b.reset_outputs();
        p.lse[-1] = 0.0f;
        CHECK_THAT(b.write_outside(), Catch::Contains("at 1 element before lse"));
    }
}

TEST_CASE("a read past an input placed against the guard page faults", "[case_v2]") {
    GuardPageBuffer buf(10);
    buf.data()[9] = 1;  // the last byte is accessible
    CHECK(buf.size() == 10);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        std::signal(SIGSEGV, SIG_DFL);  // the test framework's handler would report and carry on
        volatile unsigned char* p = buf.data();
        const unsigned char x = p[10];  // one past the end: the guard page
        _exit(x == 0 ? 3 : 4);          // reached only if the read did not fault
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGSEGV);
    GuardPageBuffer moved = std::move(buf);
    CHECK(moved.data()[9] == 1);
}

TEST_CASE("transforms keep the logical problem", "[case_v2]") {
    const KernelCase c = small_case(LayoutKind::bhtd);
    const KernelInputs in = fill_inputs(c);
    // GQA -> MHA: query head h reads the original kv head h / 2.
    KernelCase mha = c;
    KernelInputs rep = in;
    replicate_kv_heads(mha, rep);
    REQUIRE(mha.kv_heads == 4);
    for (int h = 0; h < 4; ++h) CHECK(rep.k_at(1, h, 2, 4, mha) == in.k_at(1, h / 2, 2, 4, c));
    require_same_logical(mha, rep, build_case(mha, rep));
    // A sequence alone.
    const KernelCase one = sequence_alone(c, 1);
    const KernelInputs one_in = sequence_inputs(c, in, 1);
    CHECK(one.kv_lens == std::vector<int>{3});
    CHECK(one_in.v_at(0, 1, 2, 2, one) == in.v_at(1, 1, 2, 2, c));
    // Rows [1, 2) of sequence 0 alone: q_pos 5, causal keys 0..5.
    const KernelCase rows = rows_alone(c, 0, 1, 2);
    const KernelInputs rows_in = rows_inputs(c, in, 0, 1, 2);
    CHECK(rows.q_pos == std::vector<int>{5});
    CHECK(rows.kv_lens == std::vector<int>{6});
    CHECK(rows_in.q_at(0, 3, 0, 4, rows) == in.q_at(0, 3, 1, 4, c));
    // Another capacity / block permutation: the same logical numbers.
    require_same_logical(c, in, build_case(with_capacity(c, 30), in));
    require_same_logical(c, in, build_case(with_pages(c, 2, 99, 5, 3), in));
}
