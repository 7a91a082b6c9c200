// tests/zoo/zoo_v2_test.cpp — the version 2 zoo of kernels/zoo_v2.cpp: the two correct kernels
// agree with each other, with a float64 loop written here and within the float64 oracle's bound
// (on hand-made and random problems covering every feature of kernel_abi_v2.h), and every mutant
// is exactly its bug: it differs from its base (and leaves the oracle's bound) on a problem that
// shows the bug, and equals its base on problems where the bug cannot show.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attncheck/problem_v2.hpp"
#include "kernels/registry.hpp"
#include "reference/attention_v2.hpp"
#include "tests/zoo/spec_v2.hpp"

using namespace attncheck;
using namespace zoo_test;

namespace {

struct Result {
    int rc = 0;
    std::vector<float> out;  // logical rows (b, h, i), Dv each
    std::vector<float> lse;  // logical rows (b, h, i)
};

// The buffers of a Spec, and the problem pointing at them.
struct Case {
    Spec spec;
    int B;
    SequenceArrays arrays;
    std::vector<std::int32_t> table;
    std::vector<std::uint8_t> q, k, v, out;  // dtype elements
    std::vector<float> lse;
    attncheck_problem_v2 p{};

    explicit Case(const Spec& s) : spec(s), B(int(s.keys.size())) {
        std::mt19937 rng(s.seed);
        std::uniform_real_distribution<float> uni(-s.magnitude, s.magnitude);
        const std::size_t es = dtype_size(s.dtype);
        Extents e = set_problem(s, arrays, p);
        const auto bind = [&](std::vector<std::uint8_t>& buf, attncheck_tensor_v2& t, std::int64_t n0, std::int64_t H,
                              std::int64_t T, std::int64_t D) {
            const std::int64_t n = strides_of(s.layout, n0, H, T, D, t.stride);
            buf.resize(std::size_t(n) * es);
            t.data = buf.data();
            return n;
        };
        // q, out, lse
        const std::int64_t n_q = bind(q, p.q, e.q_n0, s.Hq, e.q_T, s.Dk);
        for (std::int64_t x = 0; x < n_q; ++x) store_element(s.dtype, q.data(), x, uni(rng));
        const std::int64_t n_out = bind(out, p.out, e.q_n0, s.Hq, e.q_T, s.Dv);
        for (std::int64_t x = 0; x < n_out; ++x) store_element(s.dtype, out.data(), x, kNaN);
        if (s.lse) lse.assign(std::size_t(e.lse_elements(s.Hq)), kNaN);
        p.lse = s.lse ? lse.data() : nullptr;
        // k, v
        if (s.mode == Mode::paged) {
            const int bs = s.block_size;
            const int stride = (p.kv_len + bs - 1) / bs + 1;
            int used = 0;
            std::vector<std::vector<int>> rows(static_cast<std::size_t>(B));
            for (int b = 0; b < B; ++b) {
                const int keys = s.with_kv_lens ? s.keys[size_t(b)] : p.kv_len;
                const int need = s.table_covers_capacity ? stride : (keys + bs - 1) / bs;
                for (int x = 0; x < need; ++x) rows[size_t(b)].push_back(used++);
            }
            const int num_blocks = used + 2;  // two never used
            std::vector<int> perm(static_cast<std::size_t>(num_blocks));
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            table.assign(static_cast<std::size_t>(B * stride), -1);
            for (int b = 0; b < B; ++b)
                for (std::size_t x = 0; x < rows[size_t(b)].size(); ++x)
                    table[size_t(b * stride) + x] = perm[size_t(rows[size_t(b)][x])];
            p.block_table = table.data(), p.block_table_stride = stride, p.block_size = bs, p.num_blocks = num_blocks;
            e.k_n0 = num_blocks, e.k_T = bs;
        }
        const std::int64_t n_k = bind(k, p.k, e.k_n0, s.Hk, e.k_T, s.Dk);
        for (std::int64_t x = 0; x < n_k; ++x) store_element(s.dtype, k.data(), x, s.padding);
        const std::int64_t n_v = bind(v, p.v, e.k_n0, s.Hk, e.k_T, s.Dv);
        for (std::int64_t x = 0; x < n_v; ++x) store_element(s.dtype, v.data(), x, s.padding);
        fill_keys(p, s.padding, [&] { return uni(rng); });
    }

    Case(const Case&) = delete;

    // The logical rows of out and lse as `fn` writes them on a fresh copy of the outputs.
    Result run(attncheck_kernel_v2_fn fn) {
        std::fill(lse.begin(), lse.end(), kNaN);
        for (std::size_t x = 0; x < out.size() / dtype_size(p.dtype); ++x)
            store_element(p.dtype, out.data(), std::int64_t(x), kNaN);
        Result r;
        r.rc = fn(&p);
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < p.q_heads; ++h)
                for (int i = 0; i < q_len_of(p, b); ++i) {
                    for (int c = 0; c < p.value_dim; ++c)
                        r.out.push_back(load_element(p.dtype, out.data(), q_offset_v2(p, p.out, b, h, i, c)));
                    r.lse.push_back(p.lse ? p.lse[lse_offset_v2(p, b, h, i)] : 0.0f);
                }
        return r;
    }
};

// The problem's attention in float64, straight from the ABI's text (visible_v2, the score
// formula, kv_offset_v2), on the same dtype-rounded inputs.
Result float64_attention(const Case& c) {
    const attncheck_problem_v2& p = c.p;
    Result r;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_len_of(p, b); ++i) {
                const int hk = kv_head_of(p, h);
                std::vector<double> s;
                std::vector<int> js;
                for (int j = 0; j < kv_len_of(p, b); ++j) {
                    if (!visible_v2(p, b, i, j)) continue;
                    double dot = 0;
                    for (int x = 0; x < p.head_dim; ++x)
                        dot += double(load_element(p.dtype, p.q.data, q_offset_v2(p, p.q, b, h, i, x))) *
                               load_element(p.dtype, p.k.data, kv_offset_v2(p, p.k, b, hk, j, x));
                    double sc = p.scale * dot;
                    if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
                    if (p.alibi_slopes) sc -= double(p.alibi_slopes[h]) * double(std::int64_t(p.q_pos[b]) + i - j);
                    s.push_back(sc);
                    js.push_back(j);
                }
                const double m = s.empty() ? 0 : *std::max_element(s.begin(), s.end());
                double sum = 0;
                for (double x : s) sum += std::exp(x - m);
                for (int col = 0; col < p.value_dim; ++col) {
                    double acc = 0;
                    for (std::size_t n = 0; n < s.size(); ++n)
                        acc += std::exp(s[n] - m) *
                               load_element(p.dtype, p.v.data, kv_offset_v2(p, p.v, b, hk, js[n], col));
                    r.out.push_back(s.empty() ? 0.0f : float(acc / sum));
                }
                r.lse.push_back(s.empty() ? -std::numeric_limits<float>::infinity() : float(m + std::log(sum)));
            }
    return r;
}

// Largest |a - b| over out and over lse (inf where one is NaN and the other not, or -inf
// matched with a finite lse).
struct Gap {
    double out = 0, lse = 0;
};
double gap_of(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INFINITY;
    if (std::isinf(a) || std::isinf(b)) return a == b ? 0 : INFINITY;
    return std::fabs(double(a) - double(b));
}
Gap gap(const Result& a, const Result& b, bool with_lse) {
    Gap g;
    REQUIRE(a.out.size() == b.out.size());
    for (std::size_t x = 0; x < a.out.size(); ++x) g.out = std::max(g.out, gap_of(a.out[x], b.out[x]));
    if (with_lse)
        for (std::size_t x = 0; x < a.lse.size(); ++x)
            if (const double d = gap_of(a.lse[x], b.lse[x]); d > 0)
                g.lse = std::max(g.lse, std::isinf(d) ? d : d / (1.0 + std::fabs(double(b.lse[x]))));
    return g;
}

// What float32 accumulation and an output rounded to the dtype may cost, on inputs in [-1, 1]:
// the output's rounding (half an ulp at 1) twice over (or once, and probabilities rounded to the
// dtype: at most one unit roundoff of sum(p |v|) / sum(p) <= 1), and float32 sums of a few
// hundred terms.
double out_tolerance(std::int32_t dtype) { return 2 * unit_roundoff(dtype) + 2e-5; }
constexpr double kLseTolerance = 1e-5;

attncheck_kernel_v2_fn v2_kernel(const std::string& name) {
    const KernelEntry* e = find_kernel(name);
    REQUIRE(e != nullptr);
    REQUIRE(e->fn == nullptr);
    REQUIRE(e->fn_v2 != nullptr);
    return e->fn_v2;
}

// Elements of `got` outside the float64 oracle's bound (reference/attention_v2.hpp), out and lse.
int outside_oracle_bound(const Result& got, const reference::OracleV2& oracle, bool with_lse) {
    int outside = 0;
    REQUIRE(got.out.size() == oracle.out.size());
    for (std::size_t x = 0; x < got.out.size(); ++x)
        if (!(std::fabs(double(got.out[x]) - oracle.out[x]) <= oracle.out_bound[x])) ++outside;
    if (with_lse)
        for (std::size_t x = 0; x < got.lse.size(); ++x) {
            const double want = oracle.lse[x];
            if (std::isinf(want) ? got.lse[x] != want : !(std::fabs(double(got.lse[x]) - want) <= oracle.lse_bound[x]))
                ++outside;
        }
    return outside;
}

// The float64 oracle with the bound of the kernel `name`'s declaration.
reference::OracleV2 oracle_of(const Case& c, const std::string& name) {
    const KernelEntry* e = find_kernel(name);
    REQUIRE(e != nullptr);
    reference::OracleV2Options options;
    options.probabilities_rounded = e->declaration.find("rounds_probabilities=yes") != std::string::npos;
    return reference::attention_v2_oracle(c.p, options);
}

// Both bases return OK and agree with the float64 loop (and so with each other) on c, and are
// within the float64 oracle's bound.
void bases_are_right(Case& c) {
    const Result want = float64_attention(c);
    for (const char* name : {"v2_naive", "v2_tiled"}) {
        const Result got = c.run(v2_kernel(name));
        INFO(name << " on " << describe_v2(c.p));
        REQUIRE(got.rc == ATTNCHECK_OK);
        const Gap g = gap(got, want, c.spec.lse);
        CHECK(g.out <= out_tolerance(c.p.dtype));
        CHECK(g.lse <= kLseTolerance);
        CHECK(outside_oracle_bound(got, oracle_of(c, name), c.spec.lse) == 0);
    }
}

std::string base_of(const KernelEntry& m) {
    return m.description.rfind("v2_tiled", 0) == 0 ? "v2_tiled" : "v2_naive";
}

// The mutant `name` differs from its base on `shows` (beyond the tolerance, in out or, with
// `in_lse`, in lse) and equals it on each of `hides`, the bases being right on all of them.
void mutant_is_its_bug(const std::string& name, const Spec& shows, const std::vector<Spec>& hides,
                       bool in_lse = false) {
    const KernelEntry* m = find_kernel(name, KernelRole::mutant);
    REQUIRE(m != nullptr);
    const attncheck_kernel_v2_fn base = v2_kernel(base_of(*m));
    {
        Case c(shows);
        INFO(name << " shows its bug on " << describe_v2(c.p));
        bases_are_right(c);
        const Result want = c.run(base), got = c.run(m->fn_v2);
        REQUIRE(got.rc == ATTNCHECK_OK);
        CHECK(outside_oracle_bound(got, oracle_of(c, name), shows.lse) > 0);
        const Gap g = gap(got, want, shows.lse);
        if (in_lse) {  // a bug of lse alone: out still right
            CHECK(g.lse > kLseTolerance);
            CHECK(g.out <= out_tolerance(c.p.dtype));
        } else {
            CHECK(g.out > out_tolerance(c.p.dtype));
        }
    }
    for (const Spec& s : hides) {
        Case c(s);
        INFO(name << " equals its base on " << describe_v2(c.p));
        bases_are_right(c);
        const Result want = c.run(base), got = c.run(m->fn_v2);
        REQUIRE(got.rc == ATTNCHECK_OK);
        const Gap g = gap(got, want, s.lse);
        CHECK(g.out == 0);
        CHECK(g.lse == 0);
    }
}

}  // namespace

TEST_CASE("the v2 zoo: two bases and at least 12 mutants, each with fn_v2 and a one-line bug") {
    std::set<std::string> bases, mutants;
    for (const KernelEntry& e : kernel_registry()) {
        if (!e.fn_v2 || e.backward_v2 || e.role == KernelRole::builtin) continue;  // the zoo's entries, not reference_v2 and optimized_v2
        INFO(e.name);
        CHECK(e.fn == nullptr);
        CHECK(e.name.rfind("v2_", 0) == 0);
        if (e.role == KernelRole::zoo_base) {
            bases.insert(e.name);
            CHECK(e.bug.empty());
            CHECK_FALSE(e.reads_out_of_bounds);
        } else {
            REQUIRE(e.role == KernelRole::mutant);
            mutants.insert(e.name);
            CHECK(!e.bug.empty());
            CHECK(e.bug.find('\n') == std::string::npos);
            const KernelEntry* base = find_kernel(base_of(e), KernelRole::zoo_base);
            REQUIRE(base != nullptr);
            CHECK(e.declaration == base->declaration);
        }
    }
    CHECK(bases == std::set<std::string>{"v2_naive", "v2_tiled"});
    CHECK(mutants.size() >= 12);
}

TEST_CASE("v2 bases refuse a malformed problem") {
    Case c(prefill(4));
    for (const char* name : {"v2_naive", "v2_tiled"}) {
        attncheck_problem_v2 p = c.p;
        p.kv_heads = 3;  // does not divide q_heads = 2
        CHECK(v2_kernel(name)(&p) == ATTNCHECK_UNSUPPORTED);
        p = c.p;
        p.abi_version = 1;
        CHECK(v2_kernel(name)(&p) == ATTNCHECK_UNSUPPORTED);
        CHECK(v2_kernel(name)(nullptr) == ATTNCHECK_UNSUPPORTED);
    }
    Spec paged = decode(9);
    paged.mode = Mode::paged;
    Case c2(paged);
    for (const char* name : {"v2_naive", "v2_tiled"}) {
        attncheck_problem_v2 p = c2.p;
        std::vector<std::int32_t> table(c2.table);
        table[0] = p.num_blocks;  // a block that does not exist
        p.block_table = table.data();
        CHECK(v2_kernel(name)(&p) == ATTNCHECK_UNSUPPORTED);
    }
}

TEST_CASE("v2 bases agree with a float64 loop on hand-made problems of every feature") {
    std::vector<Spec> specs;
    for (int dtype : {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_F16, ATTNCHECK_DTYPE_BF16}) {
        Spec s = prefill(100);  // two tiles, a partial one
        s.dtype = dtype;
        specs.push_back(s);
    }
    { Spec s = decode(97); s.Hq = 6, s.Hk = 2; specs.push_back(s); }      // GQA, tile edge
    { Spec s = decode(193); s.Hq = 4, s.Hk = 1; specs.push_back(s); }     // MQA
    { Spec s = prefill(20); s.layout = Layout::bthd; specs.push_back(s); }
    { Spec s = prefill(20); s.layout = Layout::gapped; s.Dv = 5; specs.push_back(s); }
    { Spec s = prefill(130); s.window_left = 40; specs.push_back(s); }    // window across tiles
    { Spec s = prefill(30); s.causal = 0, s.window_left = 3, s.window_right = 7; specs.push_back(s); }
    { Spec s = prefill(30); s.causal = 0; specs.push_back(s); }
    { Spec s = prefill(30); s.softcap = 2.0f, s.scale = 2.0f; specs.push_back(s); }
    { Spec s = prefill(30); s.alibi = true; s.q_pos = {0}; specs.push_back(s); }
    {   // chunked prefill with ALiBi: positions past 0
        Spec s; s.q_rows = {5}, s.keys = {40}, s.q_pos = {35}, s.alibi = true; specs.push_back(s);
    }
    {   // kv_lens below the capacity, one sequence empty (its rows: zeros, lse -inf)
        Spec s; s.q_rows = {1, 1, 1}, s.keys = {10, 0, 120}, s.q_pos = {9, 0, 119}, s.capacity = 130;
        s.with_kv_lens = true; specs.push_back(s);
    }
    {   // varlen
        Spec s; s.mode = Mode::varlen; s.q_rows = {3, 0, 7}, s.keys = {9, 4, 7}, s.q_pos = {6, 4, 0};
        specs.push_back(s);
    }
    {   // paged, block table permuted, kv_lens
        Spec s; s.mode = Mode::paged, s.block_size = 16; s.q_rows = {4, 4}, s.keys = {50, 100};
        s.q_pos = {46, 96}, s.capacity = 110, s.with_kv_lens = true, s.layout = Layout::bthd; specs.push_back(s);
    }
    { Spec s = prefill(12); s.q_pos = {0}; s.causal = 1; s.window_left = 0; specs.push_back(s); }  // diagonal only
    for (const Spec& s : specs) {
        Case c(s);
        bases_are_right(c);
    }
}

TEST_CASE("v2 bases agree with a float64 loop on random problems (NaN/Inf in every key no row sees)") {
    for (std::uint32_t seed = 1; seed <= 150; ++seed) {
        Case c(random_spec(seed, kForwardRanges));
        INFO("seed " << seed);
        bases_are_right(c);
    }
}

TEST_CASE("v2 tiled base: a prefill's last row equals the decode step at kv_len 97") {
    const auto tiled = v2_kernel("v2_tiled");
    Spec pre = prefill(97);
    pre.seed = 5;
    Case full(pre);
    const Result all = full.run(tiled);
    Spec dec = decode(97);
    dec.seed = 5;
    Case step(dec);
    // The decode step reads the same keys; give it the prefill's last query row.
    for (int h = 0; h < 2; ++h)
        for (int x = 0; x < 8; ++x)
            store_element(step.p.dtype, step.q.data(), q_offset_v2(step.p, step.p.q, 0, h, 0, x),
                          load_element(full.p.dtype, full.q.data(), q_offset_v2(full.p, full.p.q, 0, h, 96, x)));
    step.k = full.k, step.v = full.v;
    step.p.k.data = step.k.data(), step.p.v.data = step.v.data();
    const Result one = step.run(tiled);
    for (int h = 0; h < 2; ++h)
        for (int x = 0; x < 8; ++x) CHECK(one.out[size_t(h * 8 + x)] == all.out[size_t((h * 97 + 96) * 8 + x)]);
}

TEST_CASE("v2 mutant: GQA head mapping by modulus") {
    Spec shows = decode(20); shows.Hq = 4, shows.Hk = 2;
    Spec mha = decode(20); mha.Hq = 3, mha.Hk = 3;
    Spec mqa = decode(20); mqa.Hq = 4, mqa.Hk = 1;
    mutant_is_its_bug("v2_gqa_head_modulo", shows, {mha, mqa});
}

TEST_CASE("v2 mutant: window applied on both sides") {
    Spec shows = prefill(12); shows.causal = 0, shows.window_left = 2;
    Spec causal = prefill(12); causal.window_left = 2;
    Spec symmetric = prefill(12); symmetric.causal = 0, symmetric.window_left = 2, symmetric.window_right = 2;
    mutant_is_its_bug("v2_window_both_sides", shows, {causal, symmetric});
}

TEST_CASE("v2 mutant: window one key short") {
    Spec shows = decode(30); shows.window_left = 5;
    Spec none = decode(30);
    Spec edge_at_0 = decode(30); edge_at_0.window_left = 29;  // key 0 is the window's last: dropped
    Spec edge_outside = decode(30); edge_outside.window_left = 30;
    mutant_is_its_bug("v2_window_off_by_one", shows, {none, edge_outside});
    mutant_is_its_bug("v2_window_off_by_one", edge_at_0, {});
}

TEST_CASE("v2 mutant: mask aligned top-left") {
    Spec shows = decode(30);
    Spec windowed = decode(30); windowed.window_left = 4;
    Spec first_chunk = prefill(30); first_chunk.window_left = 4;
    mutant_is_its_bug("v2_window_top_left", shows, {prefill(30), first_chunk});
    mutant_is_its_bug("v2_window_top_left", windowed, {});
}

TEST_CASE("v2 mutant: mask position from the cache capacity") {
    Spec chunk; chunk.q_rows = {4}, chunk.keys = {12}, chunk.q_pos = {0};  // a first chunk of 4 rows
    Spec short_seq = decode(8); short_seq.keys = {8}, short_seq.capacity = 20, short_seq.with_kv_lens = true;
    short_seq.window_left = 3;
    Spec last_chunk; last_chunk.q_rows = {4}, last_chunk.keys = {12}, last_chunk.q_pos = {8};
    mutant_is_its_bug("v2_causal_from_capacity", chunk, {prefill(20), decode(20), last_chunk});
    mutant_is_its_bug("v2_causal_from_capacity", short_seq, {});
}

TEST_CASE("v2 mutant: padding of the last tile multiplied by 0") {
    Spec shows = decode(10); shows.capacity = 30, shows.with_kv_lens = true;  // NaN padding rows 10..29
    Spec paged = shows; paged.mode = Mode::paged, paged.block_size = 16;     // NaN rows 10..15 of the block
    Spec zero_padding = shows; zero_padding.padding = 0.0f;
    Spec no_padding = decode(10);
    mutant_is_its_bug("v2_padding_times_zero", shows, {zero_padding, no_padding});
    mutant_is_its_bug("v2_padding_times_zero", paged, {});
}

TEST_CASE("v2 mutant: paged key count from the capacity") {
    Spec shows; shows.mode = Mode::paged, shows.block_size = 4, shows.causal = 0;
    shows.q_rows = {2}, shows.keys = {6}, shows.q_pos = {4}, shows.capacity = 16, shows.with_kv_lens = true;
    shows.table_covers_capacity = true, shows.padding = 0.5f;
    Spec full = shows; full.keys = {16}, full.padding = kNaN;                  // kv_lens[b] == kv_len
    Spec dense = shows; dense.mode = Mode::dense, dense.padding = kNaN;        // not paged
    mutant_is_its_bug("v2_paged_capacity_keys", shows, {full, dense});
}

TEST_CASE("v2 mutant: the partial tile after a full one dropped") {
    Spec long_prefill = prefill(100);
    mutant_is_its_bug("v2_tile_tail_dropped", decode(97), {decode(96), decode(192), decode(50), prefill(96)});
    mutant_is_its_bug("v2_tile_tail_dropped", long_prefill, {});
}

TEST_CASE("v2 mutant: float16 exp without the max subtraction") {
    Spec shows = decode(16); shows.dtype = ATTNCHECK_DTYPE_F16, shows.scale = 6.0f, shows.Dk = 32;
    Spec f32 = shows; f32.dtype = ATTNCHECK_DTYPE_F32;
    Spec bf16 = shows; bf16.dtype = ATTNCHECK_DTYPE_BF16;
    mutant_is_its_bug("v2_f16_exp_unshifted", shows, {f32, bf16});
}

TEST_CASE("v2 mutant: softcap after the mask") {
    Spec shows = prefill(10); shows.softcap = 3.0f;
    // Rows of one query block see different keys of the tile the block loads.
    Spec windowed = prefill(40); windowed.softcap = 3.0f, windowed.window_left = 5;
    // Every key visible: nothing masked, so the order of softcap and mask cannot show (ALiBi
    // still after the softcap).
    Spec all_visible = prefill(10); all_visible.causal = 0, all_visible.softcap = 3.0f, all_visible.alibi = true;
    mutant_is_its_bug("v2_softcap_after_mask", shows, {prefill(10), decode(10), all_visible});
    mutant_is_its_bug("v2_softcap_after_mask", windowed, {});
}

TEST_CASE("v2 mutant: softcap before the scale") {
    Spec shows = prefill(10); shows.softcap = 1.0f, shows.scale = 0.25f;
    Spec unit_scale = shows; unit_scale.scale = 1.0f;
    mutant_is_its_bug("v2_softcap_before_scale", shows, {prefill(10), unit_scale});
}

TEST_CASE("v2 mutant: lse in log2 units") {
    Spec no_lse = prefill(10); no_lse.lse = false;
    mutant_is_its_bug("v2_lse_log2", prefill(10), {no_lse}, /*in_lse=*/true);
}

TEST_CASE("v2 mutant: empty row's lse 0") {
    Spec shows; shows.q_rows = {1, 1}, shows.keys = {0, 5}, shows.q_pos = {0, 4}, shows.capacity = 5;
    shows.with_kv_lens = true;
    Spec no_empty = shows; no_empty.keys = {3, 5}, no_empty.q_pos = {2, 4};
    mutant_is_its_bug("v2_empty_row_lse_zero", shows, {no_empty}, /*in_lse=*/true);
}

TEST_CASE("v2 mutant: ALiBi with the wrong sign") {
    Spec shows = prefill(10); shows.alibi = true;
    Spec one_key = decode(1); one_key.alibi = true;  // a bias of 0 either way
    mutant_is_its_bug("v2_alibi_sign_flipped", shows, {prefill(10), one_key});
}

TEST_CASE("v2 mutant: ALiBi relative to the row index (a per-row shift: only lse shows it)") {
    Spec shows = decode(10); shows.alibi = true;
    Spec first_chunk = prefill(10); first_chunk.alibi = true;
    Spec no_alibi = decode(10);
    mutant_is_its_bug("v2_alibi_row_relative", shows, {first_chunk, no_alibi}, /*in_lse=*/true);
}

TEST_CASE("v2 mutant: key rows assumed contiguous") {
    Spec shows = prefill(10); shows.layout = Layout::bthd;  // k.stride[2] = Hk * Dk
    Spec one_head = shows; one_head.Hq = 1, one_head.Hk = 1;  // bthd with one head: stride[2] = Dk
    mutant_is_its_bug("v2_k_rows_contiguous", shows, {prefill(10), one_head});
}

TEST_CASE("v2 mutant: varlen keys packed by cu_seqlens_q") {
    Spec shows; shows.mode = Mode::varlen; shows.q_rows = {3, 2}, shows.keys = {6, 4}, shows.q_pos = {3, 2};
    Spec self = shows; self.q_rows = {6, 4}, self.q_pos = {0, 0};
    mutant_is_its_bug("v2_varlen_k_from_q", shows, {self});
}

TEST_CASE("v2 mutant: bfloat16 read as float16") {
    Spec shows = prefill(10); shows.dtype = ATTNCHECK_DTYPE_BF16;
    Spec f16 = prefill(10); f16.dtype = ATTNCHECK_DTYPE_F16;
    mutant_is_its_bug("v2_bf16_read_as_f16", shows, {prefill(10), f16});
}

TEST_CASE("v2 mutant: window_right ignored") {
    Spec shows = prefill(12); shows.causal = 0, shows.window_left = 2, shows.window_right = 3;
    Spec left_only = prefill(12); left_only.causal = 0, left_only.window_left = 2;
    Spec causal = prefill(12); causal.window_left = 2;
    mutant_is_its_bug("v2_window_right_ignored", shows, {left_only, causal});
}

TEST_CASE("v2 mutant: block_table rows apart by the capacity's block count") {
    Spec shows; shows.mode = Mode::paged, shows.block_size = 4;  // block_table_stride 4, not 3
    shows.q_rows = {1, 1}, shows.keys = {10, 7}, shows.q_pos = {9, 6}, shows.capacity = 12, shows.with_kv_lens = true;
    shows.table_covers_capacity = true;  // every entry a block: the mutant's reads stay inside k and v
    Spec one_sequence = shows; one_sequence.q_rows = {1}, one_sequence.keys = {10}, one_sequence.q_pos = {9};
    Spec dense = shows; dense.mode = Mode::dense;
    mutant_is_its_bug("v2_table_stride_from_capacity", shows, {one_sequence, dense});
}

TEST_CASE("v2 mutant: a key's row in its block by a power-of-two mask") {
    // Block size 12: key 4's row is 4 % 12 = 4, but 4 & 11 = 0 (key 9's is 9 either way).
    Spec shows; shows.mode = Mode::paged, shows.block_size = 12;
    shows.q_rows = {1}, shows.keys = {30}, shows.q_pos = {29};
    Spec pow2 = shows; pow2.block_size = 16;  // right for every power of two
    Spec one = shows; one.block_size = 1;
    Spec dense = shows; dense.mode = Mode::dense;
    mutant_is_its_bug("v2_block_row_pow2_mask", shows, {pow2, one, dense});
}

TEST_CASE("v2 mutant: lse strides ignored") {
    Spec shows = prefill(10); shows.lse_rows_outer = true;
    Spec varlen; varlen.mode = Mode::varlen; varlen.q_rows = {3, 5}, varlen.keys = {3, 5}, varlen.q_pos = {0, 0};
    Spec no_lse = shows; no_lse.lse = false;
    mutant_is_its_bug("v2_lse_contiguous", shows, {prefill(10), varlen, no_lse}, /*in_lse=*/true);
}

TEST_CASE("v2 bases read no key row past the last one a query row sees: k and v end there, ASan checks") {
    // One kv head in [B, H, T, D]: the rows past kv_lens[b] are the end of the buffers, which are
    // cut just after the last key the rows see (a sanitizer build faults on any read past it).
    for (bool causal_window : {false, true}) {
        Spec s = decode(10);
        s.Hq = 2, s.Hk = 1, s.capacity = 40, s.with_kv_lens = true;
        if (causal_window) s.q_rows = {3}, s.q_pos = {5}, s.window_left = 2;  // rows see keys 3..7
        Case c(s);
        int last = 0;
        for (int j = 0; j < 10; ++j)
            if (key_seen(c.p, 0, j)) last = j;
        const std::size_t es = dtype_size(c.p.dtype);
        const auto cut = [&](const std::vector<std::uint8_t>& full, const attncheck_tensor_v2& t, int width) {
            const std::int64_t end = kv_offset_v2(c.p, t, 0, 0, last, width - 1) + 1;
            return std::vector<std::uint8_t>(full.begin(), full.begin() + end * std::int64_t(es));
        };
        std::vector<std::uint8_t> k = cut(c.k, c.p.k, s.Dk), v = cut(c.v, c.p.v, s.Dv);
        const Result whole = c.run(v2_kernel("v2_naive"));
        c.p.k.data = k.data(), c.p.v.data = v.data();
        for (const char* name : {"v2_naive", "v2_tiled"}) {
            INFO(name << " on " << describe_v2(c.p));
            const Result got = c.run(v2_kernel(name));
            REQUIRE(got.rc == ATTNCHECK_OK);
            CHECK(gap(got, whole, true).out <= out_tolerance(c.p.dtype));
        }
    }
}
