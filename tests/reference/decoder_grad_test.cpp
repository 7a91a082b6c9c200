// tests/reference/decoder_grad_test.cpp — the decoder's float64 gradients (reference/decoder_grad.hpp)
// against central finite differences on every parameter, for every wiring the backward covers
// (version 1's 48, then each version 2 feature and cross-attention, alone and combined); the
// causal logits against reference::Decoder<double>; gradient causality, and the window's reach;
// a batch's gradient as the weighted sum of its sequences'; each planted gradient bug caught; one
// AdamW step by hand.
//
// To add a wiring to the finite-difference check: add a line to feature_wirings()
// (tests/reference/feature_wirings.hpp, shared with the float32 step's test); the logits test and
// the finite-difference test both read that list.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <sstream>
#include <utility>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "reference/decoder.hpp"
#include "reference/decoder_grad.hpp"
#include "tests/reference/feature_wirings.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::reference;
using testing::feature_wirings;
using testing::memory_of;
using testing::Wiring;
using testing::wiring;

ModelConfig tiny(Norm norm, Activation act, bool tied, Positional pos, bool scale) {
    return {.vocab_size = 7, .d_model = 8, .n_heads = 2, .d_ff = 12, .n_layers = 2, .max_len = 8, .norm = norm,
            .positional = pos, .activation = act, .embed_scale_sqrt_d = scale, .tie_embeddings = tied};
}

// Two sequences (T = 5 and 7) with some weights 0; with cross-attention, sequence s gets a memory
// of 4 rows with valid_len valid[s] (0: fully padded, its cross-attention outputs only its bias).
std::vector<Sequence> batch_of(std::uint64_t seed, const ModelConfig& c, const std::vector<int>& valid = {3, 4}) {
    std::mt19937_64 rng(seed);
    std::vector<Sequence> batch;
    for (const std::size_t T : {5, 7}) {
        Sequence q;
        for (std::size_t t = 0; t < T; ++t) q.tokens.push_back(int(rng() % std::uint64_t(c.vocab_size)));
        for (std::size_t t = 0; t + 1 < T; ++t) q.weights.push_back(t % 3 == 1 ? 0.0 : 0.5 + double(rng() % 4));
        if (c.cross_attention) q.memory = memory_of(rng, c, 4, valid[batch.size()]);
        batch.push_back(q);
    }
    return batch;
}

// The largest disagreement between the analytic gradient and central differences, relative to
// max(1, |either|), over every parameter; `where` names it.
double worst_fd_error(const ModelConfig& c, const Params& p, const std::vector<Sequence>& batch, const LossOptions& o,
                      std::string& where) {
    Params grad;
    decoder_loss(c, p, batch, o, &grad);
    LossOptions exact = o;
    exact.bug = GradBug::none;  // the loss itself is exact under every planted bug
    double worst = 0;
    Params q = p;
    for (auto& [name, values] : q.values)
        for (std::size_t i = 0; i < values.size(); ++i) {
            const double keep = values[i], h = 1e-5 * std::max(1.0, std::abs(keep));
            values[i] = keep + h;
            const double up = decoder_loss(c, q, batch, exact);
            values[i] = keep - h;
            const double down = decoder_loss(c, q, batch, exact);
            values[i] = keep;
            const double fd = (up - down) / (2 * h), an = grad.at(name)[i];
            const double err = std::abs(fd - an) / std::max({1.0, std::abs(fd), std::abs(an)});
            if (err > worst) {
                worst = err;
                std::ostringstream s;
                s << name << "[" << i << "]: analytic " << an << ", finite differences " << fd;
                where = s.str();
            }
        }
    return worst;
}

TEST_CASE("decoder gradients agree with finite differences for every wiring", "[reference][grad]") {
    int configs = 0;
    for (const Norm norm : {Norm::post, Norm::pre})
        for (const Activation act : {Activation::relu, Activation::gelu, Activation::gelu_tanh})
            for (const bool tied : {true, false})
                for (const Positional pos : {Positional::sinusoidal, Positional::learned})
                    for (const bool scale : {true, false}) {
                        const ModelConfig c = tiny(norm, act, tied, pos, scale);
                        const Params p = Params::from_model(init_model(c, 100 + std::uint64_t(configs)));
                        std::string where;
                        const double err = worst_fd_error(c, p, batch_of(std::uint64_t(configs), c), {}, where);
                        INFO(to_string(norm) << " " << to_string(act) << (tied ? " tied " : " untied ") << to_string(pos)
                                             << (scale ? " sqrt_d" : " 1") << ": " << where);
                        CHECK(err < 1e-6);
                        ++configs;
                    }
    CHECK(configs == 48);
}

TEST_CASE("decoder gradients agree with finite differences with GQA, windows, rope and cross-attention",
          "[reference][grad][v2]") {
    std::uint64_t seed = 200;
    for (const Wiring& w : feature_wirings()) {
        const Params p = Params::from_model(init_model(w.config, seed));
        std::string where;
        const double err = worst_fd_error(w.config, p, batch_of(seed, w.config, w.valid), {w.mask, GradBug::none}, where);
        INFO(w.name << " (seed " << seed << "): worst " << err << " at " << where);
        CHECK(err < 1e-6);
        ++seed;
    }
}

TEST_CASE("the causal logits are reference::Decoder<double>'s", "[reference][grad]") {
    std::vector<Wiring> wirings = feature_wirings();
    for (const Norm norm : {Norm::post, Norm::pre})
        wirings.push_back({std::string("v1 ") + to_string(norm), tiny(norm, Activation::gelu, false, Positional::learned, true)});
    std::mt19937_64 rng(9);
    for (const Wiring& w : wirings) {
        if (w.mask != TrainMask::causal) continue;  // Decoder<double> has the causal mask only
        const ModelConfig& c = w.config;
        const Model m = init_model(c, 9);
        const std::vector<int> tokens = {1, 4, 0, 6, 2, 2};
        for (const int valid : w.valid) {
            std::optional<Memory> memory;
            if (c.cross_attention) memory = memory_of(rng, c, 4, valid);
            const std::vector<double> mine = decoder_logits(c, Params::from_model(m), tokens, TrainMask::causal, memory);
            const auto theirs = Decoder<double>(m).forward(tokens, memory);
            REQUIRE(mine.size() == theirs.size());
            double worst = 0;
            for (std::size_t i = 0; i < mine.size(); ++i) worst = std::max(worst, std::abs(mine[i] - theirs.data()[i]));
            INFO(w.name << (c.cross_attention ? ", memory valid_len " + std::to_string(valid) : std::string())
                        << ": worst difference " << worst);
            CHECK(worst < 1e-12);
            if (!c.cross_attention) break;
        }
    }
}

// Untied embeddings, and tokens after position k that no earlier position holds: the rows of
// those tokens in the embedding's gradient are what the positions after k receive. Run on the
// version 1 decoder and on one with every feature (the memory is the same for every position, so
// it carries nothing from the future).
TEST_CASE("gradient causality: the loss of positions 0..k gives the tokens after k exactly nothing", "[reference][grad]") {
    std::vector<Wiring> wirings = {{"v1 pre sinusoidal", tiny(Norm::pre, Activation::gelu, false, Positional::sinusoidal, true)},
                                   wiring("cross + gqa + rope + window 2 pre", Norm::pre,
                                          {.n_heads = 4, .n_kv_heads = 2, .window = 2, .rope = true, .cross = true})};
    for (const Wiring& w : wirings) {
        INFO(w.name);
        const ModelConfig& c = w.config;
        const Params p = Params::from_model(init_model(c, 3));
        const std::size_t k = 3;
        Sequence q{{0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 0, 0, 0}};  // predicts tokens 1..k from positions 0..k-1
        std::mt19937_64 rng(3);
        if (c.cross_attention) q.memory = memory_of(rng, c, 4, 3);
        const auto future_rows = [&](const Params& g) {
            double most = 0;
            for (std::size_t t = k + 1; t < q.tokens.size(); ++t)
                for (std::size_t col = 0; col < std::size_t(c.d_model); ++col)
                    most = std::max(most, std::abs(g.at("embed.weight")[std::size_t(q.tokens[t]) * std::size_t(c.d_model) + col]));
            return most;
        };
        Params g;
        decoder_loss(c, p, {q}, {}, &g);
        CHECK(future_rows(g) == 0.0);
        // Without the mask, or with a backward that forgets it, the future gets a gradient.
        decoder_loss(c, p, {q}, {TrainMask::none, GradBug::none}, &g);
        CHECK(future_rows(g) > 1e-6);
        decoder_loss(c, p, {q}, {TrainMask::causal, GradBug::mask_ignored_in_backward}, &g);
        CHECK(future_rows(g) > 1e-6);
    }
}

// The window's reach: with window w and L layers, the loss of position k alone depends on
// positions k - L*w .. k only. Learned positions, so that pos.weight's row t is exactly what
// position t receives: rows before k - L*w get exactly 0, row k - L*w does not (the edge is where
// MODEL.md puts it, not one off). Without the window, and with the planted bug that recomputes
// P with no mask, the gradient reaches further; mask none drops the causal part only, so the
// window's left edge still holds.
TEST_CASE("a sliding window: no gradient reaches a position behind the window", "[reference][grad][v2]") {
    const Wiring w = wiring("window 1 pre", Norm::pre, {.window = 1});
    const ModelConfig& c = w.config;
    const Params p = Params::from_model(init_model(c, 21));
    const std::size_t L = std::size_t(c.n_layers), window = 1, k = 5, edge = k - L * window;
    const Sequence q{{0, 1, 2, 3, 4, 5, 6}, {0, 0, 0, 0, 0, 1}};  // the loss of position k = 5 only
    const std::size_t d = std::size_t(c.d_model);
    const auto row_norm = [&](const Params& g, std::size_t t) {
        double sum = 0;
        for (std::size_t col = 0; col < d; ++col) sum += std::abs(g.at("pos.weight")[t * d + col]);
        return sum;
    };
    const auto behind = [&](const Params& g) {
        double sum = 0;
        for (std::size_t t = 0; t < edge; ++t) sum += row_norm(g, t);
        return sum;
    };
    Params g;
    decoder_loss(c, p, {q}, {}, &g);
    CHECK(behind(g) == 0.0);
    CHECK(row_norm(g, edge) > 1e-6);
    decoder_loss(c, p, {q}, {TrainMask::none, GradBug::none}, &g);
    CHECK(behind(g) == 0.0);
    decoder_loss(c, p, {q}, {TrainMask::causal, GradBug::mask_ignored_in_backward}, &g);
    CHECK(behind(g) > 1e-6);
    ModelConfig unwindowed = c;
    unwindowed.attn_window = -1;
    decoder_loss(unwindowed, p, {q}, {}, &g);
    CHECK(behind(g) > 1e-6);
}

TEST_CASE("a batch's gradient is the weighted sum of its sequences' gradients", "[reference][grad]") {
    const ModelConfig c = tiny(Norm::post, Activation::relu, true, Positional::learned, true);
    const Params p = Params::from_model(init_model(c, 5));
    const std::vector<Sequence> batch = batch_of(77, c);
    const auto weight = [](const Sequence& q) {
        double w = 0;
        for (const double x : q.weights) w += x;
        return w;
    };
    Params whole;
    const double loss = decoder_loss(c, p, batch, {}, &whole);
    double total = 0, loss_sum = 0;
    Params sum = p.zeros_like();
    for (const Sequence& q : batch) {
        Params one;
        loss_sum += weight(q) * decoder_loss(c, p, {q}, {}, &one);
        for (auto& [name, v] : sum.values)
            for (std::size_t i = 0; i < v.size(); ++i) v[i] += weight(q) * one.at(name)[i];
        total += weight(q);
    }
    CHECK(std::abs(loss * total - loss_sum) < 1e-9 * std::abs(loss_sum));
    for (const auto& [name, v] : whole.values)
        for (std::size_t i = 0; i < v.size(); ++i) CHECK(std::abs(v[i] * total - sum.at(name)[i]) < 1e-9);
}

TEST_CASE("each planted gradient bug is caught by finite differences", "[reference][grad]") {
    // Tied and learned positions, so that every bug has something to act on.
    for (const Norm norm : {Norm::post, Norm::pre}) {
        const ModelConfig c = tiny(norm, Activation::gelu_tanh, true, Positional::learned, true);
        const Params p = Params::from_model(init_model(c, 11));
        for (const GradBug bug : all_grad_bugs()) {
            std::string where;
            const double err = worst_fd_error(c, p, batch_of(4, c), {TrainMask::causal, bug}, where);
            INFO(to_string(norm) << " " << to_string(bug) << ": worst " << err << " at " << where);
            CHECK(err > 1e-3);
        }
    }
}

TEST_CASE("each planted gradient bug is caught with GQA, a window and cross-attention", "[reference][grad][v2]") {
    // Learned positions rather than rope, so that position_shifted has a table to act on; tied,
    // for tied_embedding_once. The window is 1, so that mask_ignored_in_backward's forgotten
    // window shows even where the causal mask alone would hide little.
    Wiring w = wiring("gqa + window + cross post", Norm::post, {.n_heads = 4, .n_kv_heads = 2, .window = 1, .cross = true});
    w.config.tie_embeddings = true;
    const Params p = Params::from_model(init_model(w.config, 12));
    for (const GradBug bug : all_grad_bugs()) {
        std::string where;
        const double err = worst_fd_error(w.config, p, batch_of(5, w.config), {TrainMask::causal, bug}, where);
        INFO(w.name << " " << to_string(bug) << ": worst " << err << " at " << where);
        CHECK(err > 1e-3);
    }
}

TEST_CASE("decoder_loss refuses a bad batch and a config it cannot train, naming the problem", "[reference][grad]") {
    const ModelConfig c = tiny(Norm::post, Activation::relu, true, Positional::sinusoidal, true);
    const Params p = Params::from_model(init_model(c, 1));
    const auto says = [&](const std::vector<Sequence>& batch, const std::string& text) {
        CHECK_THROWS_WITH(decoder_loss(c, p, batch), Catch::Contains(text));
    };
    says({}, "an empty batch");
    says({{{1}, {}}}, "fewer than 2 tokens");
    says({{{1, 9}, {1}}}, "sequence 0: token 9 at index 1 is out of range [0, 7)");
    says({{{1, 2, 3}, {1}}}, "1 weights for 3 tokens");
    says({{{1, 2}, {-1}}}, "negative");
    says({{{1, 2}, {0}}}, "every weight of the batch is 0");
    says({{std::vector<int>(9, 1), std::vector<double>(8, 1.0)}}, "too many tokens: 9 > max_len 8");
    // Every feature of MODEL.md is trainable; an invalid config is still refused.
    for (const Wiring& w : feature_wirings()) CHECK_NOTHROW(check_trainable(w.config));
    ModelConfig bad = c;
    bad.n_kv_heads = 3;  // does not divide n_heads = 2
    CHECK_THROWS_WITH(check_trainable(bad), Catch::Contains("n_kv_heads"));
    // The memory must match the config's cross-attention, sequence by sequence.
    std::mt19937_64 rng(1);
    says({{{1, 2}, {1}, memory_of(rng, c, 2, 2)}}, "sequence 0: memory was given, but the model has no cross-attention");
    const ModelConfig cross = wiring("cross post", Norm::post, {.cross = true}).config;
    const Params pc = Params::from_model(init_model(cross, 1));
    Memory outside = memory_of(rng, cross, 2, 2);
    outside.valid_len = 3;
    const std::vector<std::pair<Sequence, std::string>> refused = {
        {{{1, 2}, {1}}, "sequence 0: the model has cross-attention but no memory was given"},
        {{{1, 2}, {1}, outside}, "sequence 0: memory valid_len 3 is outside [0, 2]"},
    };
    for (const auto& [q, text] : refused) CHECK_THROWS_WITH(decoder_loss(cross, pc, {q}), Catch::Contains(text));
    CHECK_THROWS_WITH(decoder_logits(cross, pc, {1, 2}), Catch::Contains("no memory was given"));
}

TEST_CASE("one AdamW step, by hand", "[reference][grad]") {
    Params p;
    p.values = {{"w.weight", {1.0, -2.0}}, {"w.bias", {0.5}}};
    p.shapes = {{"w.weight", {1, 2}}, {"w.bias", {1}}};
    Params g = p.zeros_like();
    g.values["w.weight"] = {3.0, 0.0};
    g.values["w.bias"] = {4.0};
    AdamW opt;
    opt.lr = 0.1;
    opt.weight_decay = 0.5;
    opt.clip_norm = 1.0;  // |g| = 5: clipped to 1, g = (0.6, 0, 0.8)
    const double norm = opt.step(p, g);
    CHECK(norm == Approx(5.0));
    // First step: m/(1-b1) = g, v/(1-b2) = g^2, so the update is lr * g / (|g| + eps) = lr * sign(g).
    // The matrix is decayed first: w *= 1 - lr * wd = 0.95.
    CHECK(p.at("w.weight")[0] == Approx(0.95 - 0.1).epsilon(1e-6));
    CHECK(p.at("w.weight")[1] == Approx(-1.9).epsilon(1e-9));  // no gradient: decay only
    CHECK(p.at("w.bias")[0] == Approx(0.5 - 0.1).epsilon(1e-6));  // a bias is not decayed
}

}  // namespace
