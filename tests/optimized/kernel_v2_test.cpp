// tests/optimized/kernel_v2_test.cpp — attncheck_optimized_kernel_v2 (kernel ABI version 2)
// against the float64 oracle (reference/attention_v2.hpp), plus the exact properties it promises.
//
// Accuracy: every output element and lse value is compared with the oracle's float64 attention
// of the same (dtype-rounded) inputs, and the error must stay within the oracle's bound for any
// correct float32 evaluation (NUMERICS.md version 2), as a ratio <= 1.
//
// Exact properties (bitwise): NaN in every element the kernel must not read (padding, gaps of
// strided views, unused cache blocks, keys outside every row's window, rows of other
// sequences) gives the same bits as zeros there; nothing outside out and lse is written; a
// problem version 1 can express gives exactly attncheck_optimized_kernel's bits; one thread
// and two give the same bits; a paged cache under a permuted block table gives the bits of
// the same keys in one dense tensor; malformed problems are refused and leave out untouched.
//
// Shapes straddle the kernel's 64-key tiles (lengths 1, 95, 96, 97, 127..129, 513).
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, Tq / Tk = rows / keys of a
// sequence, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/abi_v1.hpp"
#include "attncheck/kernels.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"
#include "optimized/attention_v2.hpp"
#include "reference/attention_v2.hpp"
#include "tests/reference/v2_case.hpp"
#include "thread_count.hpp"

namespace {

using attncheck::q_len_of;
using attncheck::V1Call;
using attncheck::v1_call_of;
using namespace attncheck::test;  // V2Case, its specs and buffers (tests/reference/v2_case.hpp)
using Case = SeededSpec;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A built problem: values where the kernel may read, `poison` everywhere else (padding, gaps,
// unused blocks, keys no row sees).
struct Built : V2Case {
    std::string name;

    Built(const Case& c, float poison) : V2Case(c.problem(), poison), name(c.name()) {
        // Table entries past a sequence's blocks are out of range: reading one is caught.
        for (int b = 0; b < p.batch && p.block_table; ++b)
            for (int e = (tk(b) + p.block_size - 1) / p.block_size; e < p.block_table_stride; ++e)
                block_table[std::size_t(b * p.block_table_stride + e)] = -5;
        std::mt19937_64 rng(c.seed);
        std::uniform_real_distribution<float> uni(-c.input_scale, c.input_scale);
        fill_read([&] { return uni(rng); });
    }

    int run() { return attncheck_optimized_kernel_v2(&p); }
};

// Runs the kernel on bt and checks every result against the float64 oracle within its bound
// (the error of any correct float32 evaluation, NUMERICS.md version 2): rows that see no key
// must be exactly 0 with lse -inf; nothing else in out or lse is written.
void check_against_truth(Built& bt) {
    INFO(bt.name);
    REQUIRE(attncheck::problem_v2_error(bt.p).empty());
    const attncheck::reference::OracleV2 truth = attncheck::reference::attention_v2_oracle(bt.p);
    REQUIRE(bt.run() == ATTNCHECK_OK);
    const attncheck_problem_v2& p = bt.p;
    double worst = 0;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, b); ++i) {
                const std::size_t row = truth.row(b, h, i);
                const bool empty = truth.visible[row] == 0;
                for (int c = 0; c < p.value_dim; ++c) {
                    const double got = bt.out.get(bt.out_at(b, h, i, c));
                    const std::size_t e = row * std::size_t(p.value_dim) + std::size_t(c);
                    if (empty) {
                        INFO("row with no visible key b=" << b << " h=" << h << " i=" << i << " c=" << c);
                        REQUIRE(got == 0.0);
                        continue;
                    }
                    const double ratio = std::abs(got - truth.out[e]) / truth.out_bound[e];
                    if (!(ratio <= 1.0)) {
                        INFO("out b=" << b << " h=" << h << " i=" << i << " c=" << c << ": " << got << " vs "
                                      << truth.out[e] << ", ratio " << ratio << " of bound " << truth.out_bound[e]);
                        REQUIRE(ratio <= 1.0);
                    }
                    worst = std::max(worst, ratio);
                }
                if (!p.lse) continue;
                const double got = p.lse[attncheck::lse_offset_v2(p, b, h, i)];
                INFO("lse b=" << b << " h=" << h << " i=" << i << ": " << got << " vs " << truth.lse[row]);
                if (empty)
                    REQUIRE(got == -kInf);
                else
                    REQUIRE(std::abs(got - truth.lse[row]) <= truth.lse_bound[row]);
            }
    // Nothing outside the result was written.
    const std::vector<char> out_result = bt.out_result(), lse_result = bt.lse_result();
    for (std::int64_t e = 0; e < bt.out.size(); ++e)
        if (!out_result[std::size_t(e)]) REQUIRE(bt.out.get(e) == V2Case::kOutSentinel);
    for (std::size_t e = 0; e < bt.lse.size(); ++e)
        if (!lse_result[e]) REQUIRE(bt.lse[e] == V2Case::kOutSentinel);
    CHECK(worst <= 1.0);
}

// The raw result bits (out and lse) of one run.
std::vector<std::uint32_t> result_bits(Built& bt) {
    REQUIRE(bt.run() == ATTNCHECK_OK);
    std::vector<std::uint32_t> bits = bt.out.bits();
    for (float x : bt.lse) bits.push_back(attncheck::float_to_bits(x));
    return bits;
}

// The full check of a spec: accuracy, and NaN wherever the kernel must not read changes no bit.
void check_spec(const Case& s) {
    INFO(s.name());
    Built clean(s, 0.0f);
    check_against_truth(clean);
    Built zero(s, 0.0f), poisoned(s, kNaN);
    REQUIRE(result_bits(zero) == result_bits(poisoned));
}

}  // namespace

TEST_CASE("kernel v2: its float16 conversion gives f16_to_float's bits for every pattern", "[kernel_v2]") {
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
        const float fast = attncheck::optimized::attention_v2_detail::f16_to_float_branchless(std::uint16_t(h));
        INFO("float16 bits " << h);
        REQUIRE(attncheck::float_to_bits(fast) == attncheck::float_to_bits(attncheck::f16_to_float(std::uint16_t(h))));
    }
}

TEST_CASE("kernel v2: each dtype in each layout, with GQA", "[kernel_v2]") {
    for (const std::int32_t dtype : {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_F16, ATTNCHECK_DTYPE_BF16})
        for (const Layout layout : {Layout::bhtd, Layout::bthd, Layout::gappy}) {
            Case s = prefill(97, 4, 2, dtype, 11 + std::uint64_t(dtype) * 3 + std::uint64_t(layout));
            s.layout = layout;
            s.head_dim = 24;
            s.value_dim = 20;
            check_spec(s);
        }
}

TEST_CASE("kernel v2: every group size of GQA", "[kernel_v2]") {
    for (const int hk : {1, 2, 4, 8}) {
        Case s = prefill(70, 8, hk, ATTNCHECK_DTYPE_BF16, 20 + std::uint64_t(hk));
        s.layout = Layout::bthd;
        check_spec(s);
        check_spec(decode(300, 8, hk, ATTNCHECK_DTYPE_F32, 30 + std::uint64_t(hk)));
    }
}

TEST_CASE("kernel v2: lengths next to the tile size, prefill and decode", "[kernel_v2]") {
    for (const int T : {1, 95, 96, 97, 127, 128, 129, 513}) {
        check_spec(prefill(T, 2, 1, ATTNCHECK_DTYPE_F16, std::uint64_t(T)));
        check_spec(decode(T, 4, 2, ATTNCHECK_DTYPE_BF16, std::uint64_t(T) + 1000));
    }
}

TEST_CASE("kernel v2: per-sequence positions and key counts, with padding", "[kernel_v2]") {
    Case s = sequences({5, 5, 5}, {5, 129, 96}, {0, 124, 60}, 4, 2, ATTNCHECK_DTYPE_BF16);
    s.kv_capacity = 129 + 7;
    s.layout = Layout::bthd;
    check_spec(s);
    s.causal = false;
    s.seed = 2;
    check_spec(s);
}

TEST_CASE("kernel v2: packed variable-length sequences", "[kernel_v2]") {
    Case s = sequences({5, 0, 70, 1}, {15, 3, 130, 97}, {10, 3, 60, 96}, 6, 2);
    s.varlen = true;
    for (const Layout layout : {Layout::bhtd, Layout::bthd, Layout::gappy}) {
        s.layout = layout;
        s.seed += 1;
        check_spec(s);
    }
}

TEST_CASE("kernel v2: sliding windows, causal and not, with whole tiles outside", "[kernel_v2]") {
    for (const int w : {0, 1, 16, 64, 100}) {
        Case s = prefill(300, 2, 1, ATTNCHECK_DTYPE_F32, 40 + std::uint64_t(w));
        s.window_left = w;
        check_spec(s);
        Case d = decode(1000, 1, 1, ATTNCHECK_DTYPE_BF16, 50 + std::uint64_t(w));
        d.window_left = w;
        check_spec(d);
    }
    const int windows[][2] = {{-1, -1}, {5, 7}, {-1, 3}, {20, -1}, {0, 0}, {70, 130}};
    for (const auto& w : windows) {
        Case s = sequences({200, 200}, {200, 250}, {0, 100}, 1, 1, ATTNCHECK_DTYPE_F32, 60 + std::uint64_t(w[0] + 7 * w[1]));
        s.causal = false;
        s.window_left = w[0];
        s.window_right = w[1];
        s.kv_capacity = 250 + 3;
        check_spec(s);
    }
}

TEST_CASE("kernel v2: rows that see no key give 0 and lse -inf", "[kernel_v2]") {
    // Sequence 0 has no keys. Sequence 1's rows are 20+ keys past its last key: with a window of
    // 5, none is visible; sequence 2's rows see some.
    Case s = sequences({5, 5, 5}, {0, 10, 10}, {0, 30, 3}, 2, 2);
    s.window_left = 5;
    s.kv_capacity = 10 + 2;
    check_spec(s);
}

TEST_CASE("kernel v2: softcap and ALiBi", "[kernel_v2]") {
    for (const float cap : {0.5f, 30.0f}) {
        Case s = prefill(150, 4, 1, ATTNCHECK_DTYPE_F32, 70 + std::uint64_t(cap));
        s.softcap = cap;
        s.input_scale = 4;
        check_spec(s);
    }
    Case a = prefill(200, 4, 2, ATTNCHECK_DTYPE_BF16);
    a.alibi = halving_alibi_slopes(a.q_heads);
    check_spec(a);
    a.softcap = 5;
    a.window_left = 50;
    a.seed = 2;
    check_spec(a);
}

TEST_CASE("kernel v2: paged K/V under a permuted block table", "[kernel_v2]") {
    for (const int bs : {1, 7, 16, 64, 128}) {
        Case s = sequences({1, 1, 30}, {513, 97, 30}, {512, 96, 0}, 4, 2, ATTNCHECK_DTYPE_BF16, 80 + std::uint64_t(bs));
        s.block_size = bs;
        s.varlen = true;  // of q: the keys are paged
        s.layout = Layout::bthd;
        check_spec(s);
        // The same keys packed in one [T,H,D] tensor give the same bits.
        Case dense = s;
        dense.block_size = 0;
        Built paged_run(s, 0.0f), dense_run(dense, 0.0f);
        REQUIRE(result_bits(paged_run) == result_bits(dense_run));
    }
}

// Two sequences of `rows` rows at the end of `keys` keys, the second with `fewer` keys less,
// over three heads with a kv head each (multi-head attention, as version 1 has it), without lse.
Case mha_pair(int rows, int keys, int fewer, bool causal, std::uint64_t seed) {
    Case s = sequences({rows, rows}, {keys, keys - fewer}, {keys - rows, keys - rows}, 3, 3, ATTNCHECK_DTYPE_F32, seed);
    s.causal = causal;
    s.lse = false;
    return s;
}

TEST_CASE("kernel v2: a problem version 1 can express gives the v1 kernel's bits", "[kernel_v2]") {
    for (const bool causal : {true, false})
        for (const int pad : {0, 5}) {
            Case s = mha_pair(33, 130, pad, causal, 90 + std::uint64_t(pad));
            s.kv_capacity = 130 + pad;
            Built bt(s, 0.0f);
            V1Call v1;
            REQUIRE(v1_call_of(bt.p, v1) == "");
            // out's view is [B, H, Tq, Dv] without gaps, between its guards.
            std::vector<float> out(bt.out.f32.size() - 2 * std::size_t(bt.out_guard));
            REQUIRE(attncheck_optimized_kernel(&v1.problem, v1.q, v1.k, v1.v, out.data()) == ATTNCHECK_OK);
            REQUIRE(bt.run() == ATTNCHECK_OK);
            REQUIRE(std::memcmp(out.data(), bt.out.f32.data() + bt.out_guard, out.size() * sizeof(float)) == 0);
            check_spec(s);
        }
}

// out of every row, in (sequence, head, row, column) order, whatever the layout.
std::vector<std::uint32_t> logical_out_bits(Built& bt) {
    REQUIRE(bt.run() == ATTNCHECK_OK);
    std::vector<std::uint32_t> bits;
    for (int b = 0; b < bt.p.batch; ++b)
        for (int h = 0; h < bt.p.q_heads; ++h)
            for (int i = 0; i < bt.tq(b); ++i)
                for (int c = 0; c < bt.p.value_dim; ++c) bits.push_back(bt.out.bits_at(bt.out_at(b, h, i, c)));
    return bits;
}

TEST_CASE("kernel v2: a float32 MHA problem gives the v1 kernel's bits in any layout, paged or packed",
          "[kernel_v2]") {
    // Both entry points run one kernel (attention_v2.cpp), whose tiles, chunks and arithmetic
    // do not depend on where the rows are: rows at other strides ([B,T,H,D]) read in place,
    // columns 2 apart, paged and packed rows converted. So the layout, the paging and the
    // packing of the same problem change no bit of out, and neither does the entry point.
    const int shapes[][2] = {{200, 200}, {1, 1100}};  // rows, keys: a prefill, a decode step
    for (const bool causal : {true, false})
        for (const auto& shape : shapes) {
            Case s = mha_pair(shape[0], shape[1], 37, causal, 300 + std::uint64_t(causal));
            s.head_dim = 24;
            s.value_dim = 40;
            INFO(s.name());
            Built v1_path(s, 0.0f);
            const std::vector<std::uint32_t> want = logical_out_bits(v1_path);
            std::vector<Case> variants;
            for (const Layout l : {Layout::bthd, Layout::gappy}) {
                Case t = s;
                t.layout = l;
                variants.push_back(t);
            }
            Case paged = s;
            paged.block_size = 16;
            paged.layout = Layout::bthd;
            variants.push_back(paged);
            paged.block_size = 7;
            variants.push_back(paged);
            Case packed = s;
            packed.varlen = true;
            packed.lse = true;
            variants.push_back(packed);
            for (const Case& t : variants) {
                INFO("variant: " << t.name());
                Built general(t, 0.0f);
                REQUIRE(logical_out_bits(general) == want);
            }
        }
}

TEST_CASE("kernel v2: one thread, two and three give the same bits", "[kernel_v2]") {
    std::vector<Case> specs;
    Case a = prefill(300, 8, 2, ATTNCHECK_DTYPE_BF16);
    a.layout = Layout::bthd;
    a.window_left = 100;
    a.softcap = 20;
    specs.push_back(a);
    Case d = sequences({3, 3}, {700, 129}, {697, 126}, 4, 1);
    d.block_size = 16;
    d.alibi = halving_alibi_slopes(d.q_heads);
    specs.push_back(d);
    Case v = sequences({64, 65, 1}, {64, 200, 9}, {0, 135, 8}, 2, 2);
    v.varlen = true;
    specs.push_back(v);
    // A decode step with few (sequence, kv head) pairs: with more than one thread its chunks of
    // keys run on different threads and are merged after; with one, in order on one thread.
    Case w = decode(4096, 8, 2, ATTNCHECK_DTYPE_BF16);
    w.block_size = 16;
    w.window_left = 1500;
    specs.push_back(w);
    for (const Case& s : specs) {
        INFO(s.name());
        Built one(s, 0.0f);
        std::vector<std::uint32_t> bits_one;
        {
            const attncheck::testing::ThreadCount threads(1);
            bits_one = result_bits(one);
        }
        for (const int n : {2, 3}) {
            INFO(n << " threads");
            Built many(s, 0.0f);
            const attncheck::testing::ThreadCount threads(n);
            REQUIRE(result_bits(many) == bits_one);
        }
    }
}

TEST_CASE("kernel v2: malformed problems are refused and out is untouched", "[kernel_v2]") {
    Case s = prefill(20, 4, 2);
    s.block_size = 8;
    const auto refused = [&](const char* what, auto&& spoil) {
        INFO(what);
        Built bt(s, 0.0f);
        spoil(bt);
        REQUIRE_FALSE(attncheck::problem_v2_error(bt.p).empty());
        const std::vector<std::uint32_t> before = bt.out.bits();
        REQUIRE(attncheck_optimized_kernel_v2(&bt.p) == ATTNCHECK_UNSUPPORTED);
        REQUIRE(bt.out.bits() == before);
    };
    refused("kv_heads does not divide q_heads", [](Built& bt) { bt.p.kv_heads = 3; });
    refused("block table entry out of range", [](Built& bt) { bt.block_table[1] = bt.p.num_blocks; });
    refused("negative block table entry", [](Built& bt) { bt.block_table[0] = -1; });
    refused("abi_version 1", [](Built& bt) { bt.p.abi_version = 1; });
    refused("struct_size too small", [](Built& bt) { bt.p.struct_size = 8; });
    refused("unknown dtype", [](Built& bt) { bt.p.dtype = 7; });
    refused("null q_pos", [](Built& bt) { bt.p.q_pos = nullptr; });
    refused("negative q_pos", [](Built& bt) { bt.q_pos[0] = -1; });
    refused("negative stride", [](Built& bt) { bt.p.k.stride[2] = -1; });
    refused("window_right with causal", [](Built& bt) { bt.p.window_right = 4; });
    refused("negative softcap", [](Built& bt) { bt.p.softcap = -1; });
    refused("kv_lens past kv_len", [](Built& bt) { bt.kv_lens[0] = bt.p.kv_len + 1; });
    REQUIRE(attncheck_optimized_kernel_v2(nullptr) == ATTNCHECK_UNSUPPORTED);
}
