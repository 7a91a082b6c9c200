// tests/optimized/kernel_strided_test.cpp — the fused attention kernel's entry on strided views
// (attention_detail::strided_kernel, the path of the version 2 kernel and of the decoder's in-place
// prefill) and on keys already in its tiles (Strides::k_tiled, a Session's cache): the bits of
// attncheck_optimized_kernel on contiguous copies, nothing written in the gaps, and refusals of
// what it cannot index.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>
#include <omp.h>

#include "attncheck/kernels.hpp"
#include "attncheck/problem.hpp"
#include "optimized/attention_kernel.hpp"
#include "tests/optimized/kernel_cases.hpp"

namespace {

namespace detail = attncheck::optimized::attention_detail;
using namespace attncheck::testing;  // Case and its helpers (kernel_cases.hpp)

// Case c's tensors as views into buffers with gaps: row r of (sequence b, head h) of a tensor
// of `width` columns at b * s[0] + h * s[1] + r * s[2], in the [B, T, H, D] order of a
// decoder's projection rows, with `gap` unused floats after each row and each sequence. The
// gaps hold a sentinel.
struct Views {
    detail::Strides st{};
    std::vector<float> q, k, v, out;
    static constexpr float kSentinel = -777.25f;

    static void strides(std::int64_t H, std::int64_t rows, std::int64_t width, std::int64_t gap,
                        std::int64_t (&s)[3]) {
        s[1] = width + gap;        // heads side by side in a row
        s[2] = H * s[1] + gap;     // rows
        s[0] = rows * s[2] + gap;  // sequences
    }
    static std::vector<float> scatter(const std::vector<float>& dense, int B, int H, int rows, int width,
                                      const std::int64_t (&s)[3]) {
        std::vector<float> x(std::size_t(B * s[0]), kSentinel);
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < H; ++h)
                for (int r = 0; r < rows; ++r)
                    for (int c = 0; c < width; ++c)
                        x[std::size_t(b * s[0] + h * s[1] + r * s[2] + c)] =
                            dense[((std::size_t(b) * H + h) * rows + r) * width + c];
        return x;
    }
    Views(const Case& c, std::int64_t gap) {
        strides(c.H, c.Tq, c.Dk, gap, st.q);
        strides(c.H, c.Tk, c.Dk, gap + 3, st.k);
        strides(c.H, c.Tk, c.Dv, gap + 1, st.v);
        strides(c.H, c.Tq, c.Dv, gap + 2, st.out);
        q = scatter(c.q, c.B, c.H, c.Tq, c.Dk, st.q);
        k = scatter(c.k, c.B, c.H, c.Tk, c.Dk, st.k);
        v = scatter(c.v, c.B, c.H, c.Tk, c.Dv, st.v);
        out.assign(std::size_t(c.B * st.out[0]), kSentinel);
    }
    int run(const attncheck_problem& p) {
        return detail::strided_kernel(p, st, q.data(), k.data(), v.data(), out.data());
    }
    // out's elements in [B, H, Tq, Dv] order; every float of the gaps must still be the sentinel.
    std::vector<float> dense_out(const Case& c, bool& gaps_untouched) const {
        std::vector<float> d(c.out_size());
        std::vector<char> seen(out.size(), 0);
        for (int b = 0; b < c.B; ++b)
            for (int h = 0; h < c.H; ++h)
                for (int r = 0; r < c.Tq; ++r)
                    for (int col = 0; col < c.Dv; ++col) {
                        const std::size_t at = std::size_t(b * st.out[0] + h * st.out[1] + r * st.out[2] + col);
                        d[((std::size_t(b) * c.H + h) * c.Tq + r) * c.Dv + col] = out[at];
                        seen[at] = 1;
                    }
        gaps_untouched = true;
        for (std::size_t i = 0; i < out.size(); ++i)
            if (!seen[i] && std::memcmp(&out[i], &kSentinel, sizeof(float)) != 0) gaps_untouched = false;
        return d;
    }
};

// The shapes the kernel is given as views, seeds from seed0: several query blocks (values and
// query rows copied beside the packed keys), decode steps (on 2 heads of 1300 keys the chunks go
// across threads; on 8 heads of 1025 not), one block of a few rows, non-causal, padding, widths
// that are not a multiple of a vector, kv_len not a multiple of a tile.
std::vector<Case> view_cases(std::uint64_t seed0) {
    std::vector<Case> cases = {
        make_case(1, 3, 200, 200, 64, 64, 0, true, seed0),
        make_case(2, 2, 1, 1300, 64, 64, 1299, true, seed0 + 1),
        make_case(1, 8, 1, 1025, 64, 64, 1000, true, seed0 + 2),
        make_case(1, 2, 5, 700, 24, 40, 695, true, seed0 + 3),
        make_case(2, 2, 130, 130, 17, 9, 0, false, seed0 + 4),
        make_case(2, 1, 70, 600, 16, 16, 530, true, seed0 + 5),
    };
    Case padded = make_case(2, 2, 150, 150, 32, 32, 0, true, seed0 + 6);
    padded.padded = true;
    padded.valid = {150, 97};
    cases.push_back(padded);
    return cases;
}

}  // namespace

TEST_CASE("the kernel on strided views gives the bits of the kernel on contiguous copies", "[kernel][strided]") {
    // strided_kernel is what the decoder's in-place prefill calls (view_cases).
    ThreadCountGuard guard;
    for (const Case& c : view_cases(71))
        for (const std::int64_t gap : {0, 5})
            for (const int threads : {1, 3}) {
                INFO(c.describe() << " gap=" << gap << " threads=" << threads);
                omp_set_num_threads(threads);
                const std::vector<float> want = run_optimized(c);
                Views views(c, gap);
                const Views before = views;
                REQUIRE(views.run(c.problem()) == ATTNCHECK_OK);
                bool gaps_untouched = false;
                const std::vector<float> got = views.dense_out(c, gaps_untouched);
                INFO("first differing element " << first_difference(want.data(), got.data(), want.size()));
                CHECK(bitwise_equal(want, got));
                CHECK(gaps_untouched);
                CHECK(bitwise_equal(views.q, before.q));
                CHECK(bitwise_equal(views.k, before.k));
                CHECK(bitwise_equal(views.v, before.v));
            }
}

TEST_CASE("the kernel on strided views refuses what it cannot index", "[kernel][strided][errors]") {
    const Case c = make_case(2, 2, 8, 8, 8, 8, 0, true, 77);
    Views views(c, 1);
    const attncheck_problem p = c.problem();
    REQUIRE(views.run(p) == ATTNCHECK_OK);  // so each refusal below is about the change made
    Views negative = views;
    negative.st.v[1] = -1;
    CHECK(negative.run(p) == ATTNCHECK_UNSUPPORTED);
    Views huge = views;
    huge.st.k[0] = std::numeric_limits<std::int64_t>::max() / 2;  // sequence 1's keys: past int64
    CHECK(huge.run(p) == ATTNCHECK_UNSUPPORTED);
    attncheck_problem bad = p;
    bad.head_dim = 0;
    CHECK(views.run(bad) == ATTNCHECK_UNSUPPORTED);
    CHECK(detail::strided_kernel(p, views.st, nullptr, views.k.data(), views.v.data(), views.out.data()) ==
          ATTNCHECK_UNSUPPORTED);
    CHECK(detail::strided_kernel(p, views.st, views.q.data(), views.k.data(), views.v.data(), nullptr) ==
          ATTNCHECK_UNSUPPORTED);
}

TEST_CASE("the kernel on keys already in its tiles gives the bits of the kernel on keys in rows",
          "[kernel][strided][tiled]") {
    // Strides::k_tiled is how a Session's cache hands the built-in kernel its keys. Every key a
    // row can see is in its lane of its tile; the lanes of keys no row sees (padding, the
    // future of a causal call, past kv_len) hold NaN and inf, which must not reach any output.
    // The shapes of view_cases.
    ThreadCountGuard guard;
    for (const Case& c : view_cases(81)) {
        const std::int64_t per_head = detail::tiled_key_floats(c.Tk, c.Dk);
        std::vector<float> tiles(std::size_t(c.B * c.H * per_head));
        for (std::size_t i = 0; i < tiles.size(); ++i)
            tiles[i] = i % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        for (int b = 0; b < c.B; ++b) {
            const int valid = c.padded ? c.valid[std::size_t(b)] : c.Tk;
            const int seen = c.causal ? std::min(valid, c.q_offset + c.Tq) : valid;  // keys some row sees
            for (int h = 0; h < c.H; ++h)
                for (int j = 0; j < seen; ++j)
                    for (int col = 0; col < c.Dk; ++col)
                        tiles[std::size_t((b * c.H + h) * per_head + detail::tiled_key_offset(j, c.Dk) +
                                          col * detail::kTileKeys)] =
                            c.k[((std::size_t(b) * c.H + h) * c.Tk + j) * c.Dk + col];
        }
        const std::int64_t Tq = c.Tq, Tk = c.Tk, H = c.H, Dk = c.Dk, Dv = c.Dv;
        const detail::Strides st{.q = {H * Tq * Dk, Tq * Dk, Dk},
                                 .k = {H * per_head, per_head, 0},
                                 .v = {H * Tk * Dv, Tk * Dv, Dv},
                                 .out = {H * Tq * Dv, Tq * Dv, Dv},
                                 .k_tiled = true};
        for (const int threads : {1, 3}) {
            INFO(c.describe() << " threads=" << threads);
            omp_set_num_threads(threads);
            const std::vector<float> want = run_optimized(c);
            std::vector<float> got(c.out_size(), -1.0f);
            REQUIRE(detail::strided_kernel(c.problem(), st, c.q.data(), tiles.data(), c.v.data(), got.data()) ==
                    ATTNCHECK_OK);
            INFO("first differing element " << first_difference(want.data(), got.data(), want.size()));
            CHECK(bitwise_equal(want, got));
        }
    }
    // A head's tiles past what int64 indexes are refused, as a view of rows would be.
    const Case c = make_case(2, 2, 8, 8, 8, 8, 0, true, 88);
    std::vector<float> tiles(std::size_t(4 * detail::tiled_key_floats(8, 8))), out(c.out_size());
    detail::Strides st{.q = {16 * 8, 8 * 8, 8}, .k = {2 * 512, 512, 0}, .v = {16 * 8, 8 * 8, 8},
                       .out = {16 * 8, 8 * 8, 8}, .k_tiled = true};
    REQUIRE(detail::strided_kernel(c.problem(), st, c.q.data(), tiles.data(), c.v.data(), out.data()) == ATTNCHECK_OK);
    st.k[0] = std::numeric_limits<std::int64_t>::max() / 2;
    CHECK(detail::strided_kernel(c.problem(), st, c.q.data(), tiles.data(), c.v.data(), out.data()) ==
          ATTNCHECK_UNSUPPORTED);
}
