// tests/reference/decoder_properties_test.cpp — the exact properties MODEL.md and NUMERICS.md
// promise, checked on the reference decoder itself across every configuration.
//
// Each property is one that a plausible bug breaks:
//   incremental = teacher-forced   a position-dependent term taken from the wrong row (pos[0]
//                                  for every step), a mask relative to the wrong origin;
//   causality (bitwise)            a missing or off-by-one causal mask, a LayerNorm or softmax
//                                  that mixes rows;
//   padding is invisible (bitwise) a cross-attention that ignores memory_valid_len;
//   valid_len = 0                  NaN from 0/0 in a fully padded softmax, or a mask that
//                                  falls back to "everything visible";
//   generate                       a tie broken by the highest id, an off-by-one in the row
//                                  used for the next token.
//
// Dimension legend: V, d, h, T, S as in MODEL.md.
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "reference/decoder.hpp"
#include "variants.hpp"

namespace {

using namespace attncheck;
using reference::Decoder;

// forward_incremental against forward in float64: the two evaluate the same sums in the same
// order for every row (a row's computation only ever reads rows at or before it), so they are
// expected to agree to the last bit; 1e-12 of the largest logit is ~4000 float64 ulps, room for
// a compiler that contracts differently in the two call paths, and 8 orders below any real bug.
constexpr double kIncrementalRelBound = 1e-12;

template <class T>
bool bitwise_equal_rows(const xt::xtensor<T, 2>& a, const xt::xtensor<T, 2>& b, std::size_t rows,
                        std::size_t* first_diff = nullptr) {
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < a.shape(1); ++c)
            if (!(a(r, c) == b(r, c))) {
                if (first_diff) *first_diff = r * a.shape(1) + c;
                return false;
            }
    return true;
}

TEST_CASE("forward_incremental equals forward", "[reference][decoder]") {
    for (int index = 0; index < test::kNumVariants; ++index) {
        test::VariantCase v(21, index);
        INFO(v.describe());
        const Decoder<double> dec(v.model);
        const std::vector<int> tokens = v.tokens(v.config.max_len);  // up to N-1
        const auto memory = v.memory(4, 3);
        const xt::xtensor<double, 2> full = dec.forward(tokens, memory);             // [T, V]
        const xt::xtensor<double, 2> inc = dec.forward_incremental(tokens, memory);  // [T, V]
        REQUIRE(full.shape() == inc.shape());
        const double scale = xt::amax(xt::abs(full))();
        for (std::size_t i = 0; i < full.size(); ++i) {
            const double err = std::abs(full.flat(i) - inc.flat(i));
            if (err > kIncrementalRelBound * scale) {
                const std::size_t V = full.shape(1);
                FAIL_CHECK("logit [" << i / V << ", " << i % V << "]: forward " << full.flat(i)
                                     << ", incremental " << inc.flat(i) << ", |error| " << err
                                     << " > " << kIncrementalRelBound << " * " << scale);
                break;
            }
        }
    }
}

TEMPLATE_TEST_CASE("changing later tokens leaves earlier logit rows bitwise unchanged",
                   "[reference][decoder][causality]", float, double) {
    for (int index = 0; index < test::kNumVariants; ++index) {
        test::VariantCase v(22, index);
        INFO(v.describe());
        const ModelConfig& c = v.config;
        const Decoder<TestType> dec(v.model);
        const int T = 10;
        const int split = std::uniform_int_distribution<int>(1, T - 1)(v.rng);  // rows < split fixed
        const std::vector<int> a = v.tokens(T);
        std::vector<int> b = a;
        // Every later token changes (to a different id), so the later rows must move.
        for (int t = split; t < T; ++t) b[std::size_t(t)] = (a[std::size_t(t)] + 1 + t) % c.vocab_size;
        if (b == a) b[std::size_t(split)] = (a[std::size_t(split)] + 1) % c.vocab_size;
        const auto memory = v.memory(3, 2);
        const xt::xtensor<TestType, 2> la = dec.forward(a, memory);  // [T, V]
        const xt::xtensor<TestType, 2> lb = dec.forward(b, memory);  // [T, V]
        INFO("tokens from position " << split << " changed");
        std::size_t diff = 0;
        const bool earlier_unchanged = bitwise_equal_rows(la, lb, std::size_t(split), &diff);
        INFO("first differing element (flat) " << diff << ": " << la.flat(diff) << " vs " << lb.flat(diff));
        CHECK(earlier_unchanged);
        // Sanity: the change is visible at the first changed position (else the test could not
        // fail for a decoder that ignores its tokens).
        const xt::xtensor<TestType, 2> ra = xt::view(la, xt::range(split, T), xt::all());
        const xt::xtensor<TestType, 2> rb = xt::view(lb, xt::range(split, T), xt::all());
        CHECK_FALSE(bitwise_equal_rows(ra, rb, 1));
    }
}

TEMPLATE_TEST_CASE("memory padding rows are invisible, and real rows are not",
                   "[reference][decoder][padding]", float, double) {
    for (int index = 0; index < test::kNumVariants; ++index) {
        if (!test::variant(index).cross_attention) continue;  // padding exists only with a memory
        test::VariantCase v(23, index);
        INFO(v.describe());
        const ModelConfig& c = v.config;
        const Decoder<TestType> dec(v.model);
        const std::vector<int> tokens = v.tokens(7);
        const int S = 6, valid = 2;
        const std::optional<Memory> mem = v.memory(S, valid);
        const std::size_t d = std::size_t(c.d_model);

        // Padding rows replaced by arbitrary, large, values: logits bitwise unchanged.
        Memory padded_changed = *mem;
        for (std::size_t i = std::size_t(valid) * d; i < padded_changed.data.size(); ++i)
            padded_changed.data[i] = 1000.0f * float(i % 7) - 3000.0f;
        // A real row changed: logits must move (the test can fail).
        Memory real_changed = *mem;
        real_changed.data[0] += 1.0f;

        const xt::xtensor<TestType, 2> base = dec.forward(tokens, mem);
        const xt::xtensor<TestType, 2> same = dec.forward(tokens, padded_changed);
        const xt::xtensor<TestType, 2> moved = dec.forward(tokens, real_changed);
        std::size_t diff = 0;
        const bool unchanged = bitwise_equal_rows(base, same, base.shape(0), &diff);
        INFO("first differing element (flat) " << diff << ": " << base.flat(diff) << " vs " << same.flat(diff));
        CHECK(unchanged);
        CHECK_FALSE(bitwise_equal_rows(base, moved, base.shape(0)));
    }
}

TEMPLATE_TEST_CASE("a fully padded memory (valid_len 0) contributes only the output bias",
                   "[reference][decoder][padding]", float, double) {
    // With no visible memory row, every cross-attention head outputs exactly 0, so the sublayer
    // is 0 Wo^T + bo = bo. The same model with its cross-attention output weights zeroed computes
    // O 0^T + bo = bo for ANY memory: the two must agree bitwise.
    for (int index = 0; index < test::kNumVariants; ++index) {
        if (!test::variant(index).cross_attention) continue;
        test::VariantCase v(24, index);
        INFO(v.describe());
        const ModelConfig& c = v.config;
        const Model& m = v.model;
        Model zero_wo = m;
        for (int l = 0; l < c.n_layers; ++l) {
            Tensor& wo = zero_wo.tensors.at("layers." + std::to_string(l) + ".cross_attn.o.weight");
            std::fill(wo.data.begin(), wo.data.end(), 0.0f);
        }
        const Decoder<TestType> dec(m), dec_zero_wo(zero_wo);
        const std::vector<int> tokens = v.tokens(8);
        const std::optional<Memory> empty = v.memory(5, 0);
        std::optional<Memory> full = empty;
        full->valid_len = full->rows;

        const xt::xtensor<TestType, 2> l0 = dec.forward(tokens, empty);
        for (TestType x : l0) REQUIRE(std::isfinite(double(x)));
        const xt::xtensor<TestType, 2> lz = dec_zero_wo.forward(tokens, full);
        std::size_t diff = 0;
        const bool equal = bitwise_equal_rows(l0, lz, l0.shape(0), &diff);
        INFO("first differing element (flat) " << diff << ": " << l0.flat(diff) << " vs " << lz.flat(diff));
        CHECK(equal);
        // And every cross-attention probability is exactly 0.
        const auto probs = dec.attention_probs(tokens, empty);
        REQUIRE(probs.cross.size() == std::size_t(c.n_layers));
        for (const auto& P : probs.cross)
            for (TestType x : P) CHECK(x == TestType(0));
    }
}

TEST_CASE("generate is deterministic and is the argmax of forward over its own output",
          "[reference][decoder][generate]") {
    for (int index = 0; index < test::kNumVariants; index += 5) {
        test::VariantCase v(25, index);
        INFO(v.describe());
        const ModelConfig& c = v.config;
        const Decoder<double> dec(v.model);
        const std::vector<int> prompt = v.tokens(3);
        const auto memory = v.memory(4, 3);
        const int max_new = c.max_len - 3;  // up to the last position
        const std::vector<int> gen = dec.generate(prompt, max_new, memory);
        REQUIRE(gen.size() == std::size_t(max_new));
        CHECK(dec.generate(prompt, max_new, memory) == gen);

        std::vector<int> seq = prompt;
        seq.insert(seq.end(), gen.begin(), gen.end());
        const xt::xtensor<double, 2> logits = dec.forward(seq, memory);  // [N, V]
        for (std::size_t s = 0; s < gen.size(); ++s) {
            const std::size_t row = prompt.size() + s - 1;  // the row that predicts gen[s]
            int best = 0;
            for (int id = 1; id < c.vocab_size; ++id)
                if (logits(row, std::size_t(id)) > logits(row, std::size_t(best))) best = id;
            INFO("new token " << s << " (logit row " << row << "): generated " << gen[s]
                              << ", argmax " << best);
            CHECK(gen[s] == best);
        }
        CHECK(dec.generate(prompt, 0, memory).empty());
    }
}

TEST_CASE("generate breaks ties toward the lowest token id", "[reference][decoder][generate]") {
    // With lm_head all zeros every logit is exactly 0: a perfect tie over the whole vocabulary.
    ModelConfig c = test::variant(0);  // untied
    c.tie_embeddings = false;
    Model m = init_model(c, 7);
    Tensor& head = m.tensors.at("lm_head.weight");
    std::fill(head.data.begin(), head.data.end(), 0.0f);
    const Decoder<float> dec(m);
    CHECK(dec.generate({5, 3}, 4) == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("bad inputs to the reference decoder raise InputError", "[reference][decoder][errors]") {
    ModelConfig c = test::variant(0);
    const Decoder<double> dec(init_model(c, 1));
    const int N = c.max_len, V = c.vocab_size;
    CHECK_THROWS_AS(dec.forward({}), InputError);
    CHECK_THROWS_AS(dec.forward({0, V}), InputError);
    CHECK_THROWS_AS(dec.forward({-1}), InputError);
    CHECK_THROWS_AS(dec.forward(std::vector<int>(std::size_t(N) + 1, 0)), InputError);
    CHECK_THROWS_AS(dec.forward_incremental({}), InputError);
    CHECK_THROWS_AS(dec.attention_probs({V}), InputError);
    CHECK_THROWS_AS(dec.generate({1, 2}, -1), InputError);
    CHECK_THROWS_AS(dec.generate({1, 2}, N - 1), InputError);  // 2 + N-1 > N
    CHECK_NOTHROW(dec.generate({1, 2}, N - 2));
    CHECK_THROWS_AS(dec.generate({}, 1), InputError);
    Memory mem{2, 2, std::vector<float>(std::size_t(2 * c.d_model), 0.0f)};
    CHECK_THROWS_AS(dec.forward({1}, mem), InputError);  // memory for a model without cross-attn

    ModelConfig cc = c;
    cc.cross_attention = true;
    const Decoder<double> cross(init_model(cc, 1));
    CHECK_THROWS_AS(cross.forward({1}), InputError);  // missing memory
    Memory bad_valid = mem;
    bad_valid.valid_len = 3;
    CHECK_THROWS_AS(cross.forward({1}, bad_valid), InputError);
    Memory bad_width{2, 2, std::vector<float>(std::size_t(2 * c.d_model + 1), 0.0f)};
    CHECK_THROWS_AS(cross.forward({1}, bad_width), InputError);
    CHECK_NOTHROW(cross.forward({1}, mem));

    // A model that fails validation is refused at construction.
    Model broken = init_model(c, 1);
    broken.tensors.erase("embed.weight");
    CHECK_THROWS_AS(Decoder<float>(broken), InputError);
}

}  // namespace
