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
#include <numeric>
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
#include "thread_count.hpp"

namespace {

using attncheck::q_len_of;
using attncheck::V1Call;
using attncheck::v1_call_of;
using attncheck::visible_v2;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Layout { BHTD, BTHD, Gappy };

// A problem in words: per-sequence lengths and positions, the features, the memory layout.
struct Spec {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    int B = 1, Hq = 1, Hk = 1, Dk = 16, Dv = 16;
    std::vector<int> tq, tk, pos;  // [B] rows, keys, q_pos
    bool causal = true;
    int window_left = -1, window_right = -1;
    float softcap = 0;
    bool alibi = false;
    float scale = 0;  // 0: 1 / sqrt(Dk)
    float input_scale = 1;
    Layout layout = Layout::BHTD;
    bool varlen = false;
    int block_size = 0;   // > 0: paged K/V
    int kv_padding = 0;   // dense: rows of k/v past the longest sequence (kv_lens then given)
    bool lse = true;
    std::uint64_t seed = 1;

    std::string name() const {
        std::string s = "dtype=" + std::string(attncheck::dtype_name(dtype)) + " B=" + std::to_string(B) +
                        " Hq=" + std::to_string(Hq) + " Hk=" + std::to_string(Hk) + " Dk=" + std::to_string(Dk) +
                        " Dv=" + std::to_string(Dv) + " causal=" + std::to_string(causal) + " window=(" +
                        std::to_string(window_left) + "," + std::to_string(window_right) +
                        ") softcap=" + std::to_string(softcap) + " alibi=" + std::to_string(alibi) +
                        " layout=" + std::to_string(int(layout)) + " varlen=" + std::to_string(varlen) +
                        " block_size=" + std::to_string(block_size) + " seed=" + std::to_string(seed) + " tq/tk/pos=";
        for (int b = 0; b < B; ++b)
            s += std::to_string(tq[std::size_t(b)]) + "/" + std::to_string(tk[std::size_t(b)]) + "/" +
                 std::to_string(pos[std::size_t(b)]) + " ";
        return s;
    }
};

// A prefill of T rows over T keys, or a decode step (one row at position T - 1).
Spec prefill(int T) { Spec s; s.tq = {T}; s.tk = {T}; s.pos = {0}; return s; }
Spec decode(int T) { Spec s; s.tq = {1}; s.tk = {T}; s.pos = {T - 1}; return s; }

// Strides of a [n0, n1 (heads), n2 (rows), n3 (columns)] view in a layout; *size = elements.
void layout_strides(Layout l, std::int64_t n0, std::int64_t n1, std::int64_t n2, std::int64_t n3, std::int64_t* st,
                    std::int64_t* size) {
    switch (l) {
    case Layout::BHTD: st[3] = 1; st[2] = n3; st[1] = n2 * n3; st[0] = n1 * n2 * n3; break;
    case Layout::BTHD: st[3] = 1; st[1] = n3; st[2] = n1 * n3; st[0] = n2 * n1 * n3; break;
    case Layout::Gappy:  // [B,T,H,D] with every stride leaving a gap, columns 2 apart
        st[3] = 2; st[1] = 2 * n3 + 1; st[2] = n1 * st[1] + 3; st[0] = n2 * st[2] + 5; break;
    }
    *size = n0 * st[0];
}

// A buffer of one dtype: float32 elements, or float16 / bfloat16 bit patterns.
struct Buffer {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    std::vector<float> f32;
    std::vector<std::uint16_t> half;
    void resize(std::int32_t dt, std::int64_t n) {
        dtype = dt;
        (dt == ATTNCHECK_DTYPE_F32 ? f32.assign(std::size_t(n), 0.0f) : half.assign(std::size_t(n), 0));
    }
    void* data() { return dtype == ATTNCHECK_DTYPE_F32 ? static_cast<void*>(f32.data()) : half.data(); }
    const void* data() const { return dtype == ATTNCHECK_DTYPE_F32 ? static_cast<const void*>(f32.data()) : half.data(); }
    std::int64_t elements() const { return std::int64_t(dtype == ATTNCHECK_DTYPE_F32 ? f32.size() : half.size()); }
    void fill(float x) {
        for (std::int64_t e = 0; e < elements(); ++e) attncheck::store_element(dtype, data(), e, x);
    }
    float at(std::int64_t e) const { return attncheck::load_element(dtype, data(), e); }
    // The raw bits of every element.
    std::vector<std::uint32_t> bits() const {
        std::vector<std::uint32_t> b(static_cast<std::size_t>(elements()));
        for (std::size_t e = 0; e < b.size(); ++e)
            if (dtype == ATTNCHECK_DTYPE_F32)
                std::memcpy(&b[e], &f32[e], sizeof(float));
            else
                b[e] = half[e];
        return b;
    }
};

// A built problem: the ABI struct and everything it points to.
struct Built {
    Spec s;
    attncheck_problem_v2 p{};
    Buffer q, k, v, out;
    std::vector<float> lse;
    std::vector<std::int32_t> kv_lens, cu_q, cu_k, q_pos, table;
    std::vector<float> slopes;
    std::vector<bool> out_written;  // [out elements]: part of the result

    Built(const Built&) = delete;
    Built& operator=(const Built&) = delete;

    // Inputs: values where the kernel may read, `poison` everywhere else.
    Built(const Spec& spec, float poison) : s(spec) {
        const int B = s.B;
        const int max_tq = *std::max_element(s.tq.begin(), s.tq.end());
        const int max_tk = *std::max_element(s.tk.begin(), s.tk.end());
        p = attncheck::make_problem_v2({.dtype = s.dtype, .batch = B, .q_heads = s.Hq, .kv_heads = s.Hk,
                                        .head_dim = s.Dk, .value_dim = s.Dv, .causal = bool(s.causal),
                                        .window_left = s.window_left, .window_right = s.window_right,
                                        .scale = s.scale != 0 ? s.scale : float(1.0 / std::sqrt(double(s.Dk))),
                                        .softcap = s.softcap});
        p.q_len = std::max(1, max_tq);
        p.kv_len = std::max(1, max_tk + (s.varlen || s.block_size ? 0 : s.kv_padding));
        q_pos.assign(s.pos.begin(), s.pos.end());
        p.q_pos = q_pos.data();
        if (s.alibi) {
            for (int h = 0; h < s.Hq; ++h) slopes.push_back(std::ldexp(1.0f, -(h + 1)));
            p.alibi_slopes = slopes.data();
        }

        // Varlen packs the rows of q, out and lse, and the keys of k and v unless they are
        // paged; dense sequences all have q_len rows, and kv_lens gives their key counts.
        std::int64_t q_rows = p.q_len, k_rows = p.kv_len, k_outer = B, q_outer = B, n;
        if (s.varlen) {
            cu_q.assign(1, 0);
            for (int b = 0; b < B; ++b) cu_q.push_back(cu_q.back() + s.tq[std::size_t(b)]);
            p.cu_seqlens_q = cu_q.data();
            q_rows = std::max(1, cu_q.back());
            q_outer = 1;
        } else {
            for (int b = 0; b < B; ++b) REQUIRE(s.tq[std::size_t(b)] == max_tq);
        }
        if (s.varlen && !s.block_size) {
            cu_k.assign(1, 0);
            for (int b = 0; b < B; ++b) cu_k.push_back(cu_k.back() + s.tk[std::size_t(b)]);
            p.cu_seqlens_k = cu_k.data();
            k_rows = std::max(1, cu_k.back());
            k_outer = 1;
        } else {
            kv_lens.assign(s.tk.begin(), s.tk.end());
            p.kv_lens = kv_lens.data();
        }
        if (s.block_size) {
            // Blocks of every sequence in a shuffled order, three spare blocks never referenced,
            // and table entries past a sequence's blocks that are out of range (never read).
            std::vector<int> need(static_cast<std::size_t>(B));
            int total = 0, widest = 0;
            for (int b = 0; b < B; ++b) {
                need[std::size_t(b)] = (s.tk[std::size_t(b)] + s.block_size - 1) / s.block_size;
                total += need[std::size_t(b)];
                widest = std::max(widest, need[std::size_t(b)]);
            }
            p.num_blocks = total + 3;
            p.block_size = s.block_size;
            p.block_table_stride = widest + 1;
            std::vector<int> order(std::size_t(p.num_blocks));
            std::iota(order.begin(), order.end(), 0);
            std::mt19937_64 rng(s.seed * 7 + 3);
            std::shuffle(order.begin(), order.end(), rng);
            table.assign(std::size_t(B) * std::size_t(p.block_table_stride), -5);
            int next = 0;
            for (int b = 0; b < B; ++b)
                for (int e = 0; e < need[std::size_t(b)]; ++e)
                    table[std::size_t(b * p.block_table_stride + e)] = order[std::size_t(next++)];
            p.block_table = table.data();
            k_outer = p.num_blocks;
            k_rows = s.block_size;
        }

        layout_strides(s.layout, q_outer, s.Hq, q_rows, s.Dk, p.q.stride, &n);
        q.resize(s.dtype, n);
        layout_strides(s.layout, k_outer, s.Hk, k_rows, s.Dk, p.k.stride, &n);
        k.resize(s.dtype, n);
        layout_strides(s.layout, k_outer, s.Hk, k_rows, s.Dv, p.v.stride, &n);
        v.resize(s.dtype, n);
        layout_strides(s.layout, q_outer, s.Hq, q_rows, s.Dv, p.out.stride, &n);
        out.resize(s.dtype, n);
        p.q.data = q.data();
        p.k.data = k.data();
        p.v.data = v.data();
        p.out.data = out.data();
        if (s.lse) {
            // [B, Hq, rows] with a gap after every row.
            p.lse_stride[2] = 2;
            p.lse_stride[1] = 2 * q_rows + 1;
            p.lse_stride[0] = s.Hq * p.lse_stride[1];
            lse.assign(std::size_t(q_outer * p.lse_stride[0]), 777.0f);
            p.lse = lse.data();
        }

        q.fill(poison);
        k.fill(poison);
        v.fill(poison);
        out.fill(512.0f);
        std::mt19937_64 rng(s.seed);
        std::uniform_real_distribution<float> uni(-s.input_scale, s.input_scale);
        out_written.assign(std::size_t(out.elements()), false);
        for (int b = 0; b < B; ++b) {
            for (int h = 0; h < s.Hq; ++h)
                for (int i = 0; i < s.tq[std::size_t(b)]; ++i) {
                    for (int c = 0; c < s.Dk; ++c)
                        attncheck::store_element(s.dtype, q.data(), attncheck::q_offset_v2(p, p.q, b, h, i, c), uni(rng));
                    for (int c = 0; c < s.Dv; ++c)
                        out_written[std::size_t(attncheck::q_offset_v2(p, p.out, b, h, i, c))] = true;
                }
            for (int j = 0; j < s.tk[std::size_t(b)]; ++j) {
                bool seen = false;
                for (int i = 0; i < s.tq[std::size_t(b)] && !seen; ++i) seen = visible_v2(p, b, i, j);
                if (!seen) continue;
                for (int hk = 0; hk < s.Hk; ++hk) {
                    for (int c = 0; c < s.Dk; ++c)
                        attncheck::store_element(s.dtype, k.data(), attncheck::kv_offset_v2(p, p.k, b, hk, j, c), uni(rng));
                    for (int c = 0; c < s.Dv; ++c)
                        attncheck::store_element(s.dtype, v.data(), attncheck::kv_offset_v2(p, p.v, b, hk, j, c), uni(rng));
                }
            }
        }
    }

    int run() { return attncheck_optimized_kernel_v2(&p); }
};

// Runs the kernel on bt and checks every result against the float64 oracle within its bound
// (the error of any correct float32 evaluation, NUMERICS.md version 2): rows that see no key
// must be exactly 0 with lse -inf; nothing else in out or lse is written.
void check_against_truth(Built& bt) {
    INFO(bt.s.name());
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
                    const double got = bt.out.at(attncheck::q_offset_v2(p, p.out, b, h, i, c));
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
    for (std::int64_t e = 0; e < bt.out.elements(); ++e)
        if (!bt.out_written[std::size_t(e)]) REQUIRE(bt.out.at(e) == 512.0f);
    if (p.lse) {
        std::vector<bool> mine(bt.lse.size(), false);
        for (int b = 0; b < p.batch; ++b)
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < q_len_of(p, b); ++i) mine[std::size_t(attncheck::lse_offset_v2(p, b, h, i))] = true;
        for (std::size_t e = 0; e < bt.lse.size(); ++e)
            if (!mine[e]) REQUIRE(bt.lse[e] == 777.0f);
    }
    CHECK(worst <= 1.0);
}

// The raw result bits (out and lse) of one run.
std::vector<std::uint32_t> result_bits(Built& bt) {
    REQUIRE(bt.run() == ATTNCHECK_OK);
    std::vector<std::uint32_t> bits = bt.out.bits();
    for (float x : bt.lse) {
        std::uint32_t w;
        std::memcpy(&w, &x, sizeof w);
        bits.push_back(w);
    }
    return bits;
}

// The full check of a spec: accuracy, and NaN wherever the kernel must not read changes no bit.
void check_spec(const Spec& s) {
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
        for (const Layout layout : {Layout::BHTD, Layout::BTHD, Layout::Gappy}) {
            Spec s = prefill(97);
            s.dtype = dtype;
            s.layout = layout;
            s.Hq = 4;
            s.Hk = 2;
            s.Dk = 24;
            s.Dv = 20;
            s.seed = 11 + std::uint64_t(dtype) * 3 + std::uint64_t(layout);
            check_spec(s);
        }
}

TEST_CASE("kernel v2: every group size of GQA", "[kernel_v2]") {
    for (const int hk : {1, 2, 4, 8}) {
        Spec s = prefill(70);
        s.Hq = 8;
        s.Hk = hk;
        s.dtype = ATTNCHECK_DTYPE_BF16;
        s.layout = Layout::BTHD;
        s.seed = 20 + std::uint64_t(hk);
        check_spec(s);
        Spec d = decode(300);
        d.Hq = 8;
        d.Hk = hk;
        d.seed = 30 + std::uint64_t(hk);
        check_spec(d);
    }
}

TEST_CASE("kernel v2: lengths next to the tile size, prefill and decode", "[kernel_v2]") {
    for (const int T : {1, 95, 96, 97, 127, 128, 129, 513}) {
        Spec s = prefill(T);
        s.Hq = 2;
        s.Hk = 1;
        s.dtype = ATTNCHECK_DTYPE_F16;
        s.seed = std::uint64_t(T);
        check_spec(s);
        Spec d = decode(T);
        d.Hq = 4;
        d.Hk = 2;
        d.dtype = ATTNCHECK_DTYPE_BF16;
        d.seed = std::uint64_t(T) + 1000;
        check_spec(d);
    }
}

TEST_CASE("kernel v2: per-sequence positions and key counts, with padding", "[kernel_v2]") {
    Spec s;
    s.B = 3;
    s.Hq = 4;
    s.Hk = 2;
    s.tq = {5, 5, 5};
    s.tk = {5, 129, 96};
    s.pos = {0, 124, 60};
    s.kv_padding = 7;
    s.layout = Layout::BTHD;
    s.dtype = ATTNCHECK_DTYPE_BF16;
    check_spec(s);
    s.causal = false;
    s.seed = 2;
    check_spec(s);
}

TEST_CASE("kernel v2: packed variable-length sequences", "[kernel_v2]") {
    Spec s;
    s.varlen = true;
    s.B = 4;
    s.Hq = 6;
    s.Hk = 2;
    s.tq = {5, 0, 70, 1};
    s.tk = {15, 3, 130, 97};
    s.pos = {10, 3, 60, 96};
    for (const Layout layout : {Layout::BHTD, Layout::BTHD, Layout::Gappy}) {
        s.layout = layout;
        s.seed += 1;
        check_spec(s);
    }
}

TEST_CASE("kernel v2: sliding windows, causal and not, with whole tiles outside", "[kernel_v2]") {
    for (const int w : {0, 1, 16, 64, 100}) {
        Spec s = prefill(300);
        s.Hq = 2;
        s.Hk = 1;
        s.window_left = w;
        s.seed = 40 + std::uint64_t(w);
        check_spec(s);
        Spec d = decode(1000);
        d.window_left = w;
        d.dtype = ATTNCHECK_DTYPE_BF16;
        d.seed = 50 + std::uint64_t(w);
        check_spec(d);
    }
    const int windows[][2] = {{-1, -1}, {5, 7}, {-1, 3}, {20, -1}, {0, 0}, {70, 130}};
    for (const auto& w : windows) {
        Spec s;
        s.B = 2;
        s.tq = {200, 200};
        s.tk = {200, 250};
        s.pos = {0, 100};
        s.causal = false;
        s.window_left = w[0];
        s.window_right = w[1];
        s.kv_padding = 3;
        s.seed = 60 + std::uint64_t(w[0] + 7 * w[1]);
        check_spec(s);
    }
}

TEST_CASE("kernel v2: rows that see no key give 0 and lse -inf", "[kernel_v2]") {
    Spec s;
    s.B = 3;
    s.Hq = 2;
    s.Hk = 2;
    s.tq = {5, 5, 5};
    s.tk = {0, 10, 10};  // sequence 0 has no keys
    // Sequence 1's rows are 20+ keys past its last key: with a window of 5, none is visible;
    // sequence 2's rows see some.
    s.pos = {0, 30, 3};
    s.window_left = 5;
    s.kv_padding = 2;
    check_spec(s);
}

TEST_CASE("kernel v2: softcap and ALiBi", "[kernel_v2]") {
    for (const float cap : {0.5f, 30.0f}) {
        Spec s = prefill(150);
        s.Hq = 4;
        s.Hk = 1;
        s.softcap = cap;
        s.input_scale = 4;
        s.seed = 70 + std::uint64_t(cap);
        check_spec(s);
    }
    Spec a = prefill(200);
    a.Hq = 4;
    a.Hk = 2;
    a.alibi = true;
    a.dtype = ATTNCHECK_DTYPE_BF16;
    check_spec(a);
    a.softcap = 5;
    a.window_left = 50;
    a.seed = 2;
    check_spec(a);
}

TEST_CASE("kernel v2: paged K/V under a permuted block table", "[kernel_v2]") {
    for (const int bs : {1, 7, 16, 64, 128}) {
        Spec s;
        s.B = 3;
        s.Hq = 4;
        s.Hk = 2;
        s.tq = {1, 1, 30};
        s.tk = {513, 97, 30};
        s.pos = {512, 96, 0};
        s.block_size = bs;
        s.varlen = true;  // of q: the keys are paged
        s.dtype = ATTNCHECK_DTYPE_BF16;
        s.layout = Layout::BTHD;
        s.seed = 80 + std::uint64_t(bs);
        check_spec(s);
        // The same keys packed in one [T,H,D] tensor give the same bits.
        Spec dense = s;
        dense.block_size = 0;
        Built paged_run(s, 0.0f), dense_run(dense, 0.0f);
        REQUIRE(result_bits(paged_run) == result_bits(dense_run));
    }
}

TEST_CASE("kernel v2: a problem version 1 can express gives the v1 kernel's bits", "[kernel_v2]") {
    for (const bool causal : {true, false})
        for (const int pad : {0, 5}) {
            Spec s;
            s.B = 2;
            s.Hq = s.Hk = 3;
            s.tq = {33, 33};
            s.tk = {130, 130 - pad};
            s.pos = {97, 97};
            s.kv_padding = pad;
            s.causal = causal;
            s.lse = false;
            s.seed = 90 + std::uint64_t(pad);
            Built bt(s, 0.0f);
            const attncheck_problem_v2& p = bt.p;
            V1Call v1;
            REQUIRE(v1_call_of(p, v1) == "");
            std::vector<float> out(bt.out.f32.size());
            REQUIRE(attncheck_optimized_kernel(&v1.problem, v1.q, v1.k, v1.v, out.data()) == ATTNCHECK_OK);
            REQUIRE(bt.run() == ATTNCHECK_OK);
            REQUIRE(std::memcmp(out.data(), bt.out.f32.data(), out.size() * sizeof(float)) == 0);
            check_spec(s);
        }
}

// out of every row, in (sequence, head, row, column) order, whatever the layout.
std::vector<std::uint32_t> logical_out_bits(Built& bt) {
    REQUIRE(bt.run() == ATTNCHECK_OK);
    const std::vector<std::uint32_t> raw = bt.out.bits();
    std::vector<std::uint32_t> bits;
    for (int b = 0; b < bt.s.B; ++b)
        for (int h = 0; h < bt.s.Hq; ++h)
            for (int i = 0; i < bt.s.tq[std::size_t(b)]; ++i)
                for (int c = 0; c < bt.s.Dv; ++c)
                    bits.push_back(raw[std::size_t(attncheck::q_offset_v2(bt.p, bt.p.out, b, h, i, c))]);
    return bits;
}

TEST_CASE("kernel v2: a float32 MHA problem gives the v1 kernel's bits in any layout, paged or packed",
          "[kernel_v2]") {
    // Rows at other strides ([B,T,H,D]) go to the v1 kernel's arithmetic on the views
    // (strided_kernel); the general path (columns 2 apart, paged, packed) shares its tiles,
    // chunks and arithmetic (attention_tile.hpp). So the layout, the paging and the packing of
    // the same problem change no bit of out.
    for (const bool causal : {true, false})
        for (const Spec& base : {prefill(200), decode(1100)}) {
            Spec s = base;
            s.B = 2;
            s.Hq = s.Hk = 3;
            s.Dk = 24;
            s.Dv = 40;
            s.tq.assign(2, base.tq[0]);
            s.tk = {base.tk[0], base.tk[0] - 37};
            s.pos.assign(2, base.pos[0]);
            s.causal = causal;
            s.lse = false;
            s.seed = 300 + std::uint64_t(causal);
            INFO(s.name());
            Built v1_path(s, 0.0f);
            const std::vector<std::uint32_t> want = logical_out_bits(v1_path);
            std::vector<Spec> variants;
            for (const Layout l : {Layout::BTHD, Layout::Gappy}) {
                Spec t = s;
                t.layout = l;
                variants.push_back(t);
            }
            Spec paged = s;
            paged.block_size = 16;
            paged.layout = Layout::BTHD;
            variants.push_back(paged);
            paged.block_size = 7;
            variants.push_back(paged);
            Spec packed = s;
            packed.varlen = true;
            packed.lse = true;
            variants.push_back(packed);
            for (const Spec& t : variants) {
                INFO("variant: " << t.name());
                Built general(t, 0.0f);
                REQUIRE(logical_out_bits(general) == want);
            }
        }
}

TEST_CASE("kernel v2: one thread, two and three give the same bits", "[kernel_v2]") {
    std::vector<Spec> specs;
    Spec a = prefill(300);
    a.Hq = 8;
    a.Hk = 2;
    a.dtype = ATTNCHECK_DTYPE_BF16;
    a.layout = Layout::BTHD;
    a.window_left = 100;
    a.softcap = 20;
    specs.push_back(a);
    Spec d;
    d.B = 2;
    d.Hq = 4;
    d.Hk = 1;
    d.tq = {3, 3};
    d.tk = {700, 129};
    d.pos = {697, 126};
    d.block_size = 16;
    d.alibi = true;
    specs.push_back(d);
    Spec v;
    v.varlen = true;
    v.B = 3;
    v.Hq = 2;
    v.Hk = 2;
    v.tq = {64, 65, 1};
    v.tk = {64, 200, 9};
    v.pos = {0, 135, 8};
    specs.push_back(v);
    // A decode step with few (sequence, kv head) pairs: with more than one thread its chunks of
    // keys run on different threads and are merged after; with one, in order on one thread.
    Spec w = decode(4096);
    w.Hq = 8;
    w.Hk = 2;
    w.dtype = ATTNCHECK_DTYPE_BF16;
    w.block_size = 16;
    w.window_left = 1500;
    specs.push_back(w);
    for (const Spec& s : specs) {
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
    Spec s = prefill(20);
    s.Hq = 4;
    s.Hk = 2;
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
    refused("block table entry out of range", [](Built& bt) { bt.table[1] = bt.p.num_blocks; });
    refused("negative block table entry", [](Built& bt) { bt.table[0] = -1; });
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
