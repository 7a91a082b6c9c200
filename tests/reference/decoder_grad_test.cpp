// tests/reference/decoder_grad_test.cpp — the decoder's float64 gradients (reference/decoder_grad.hpp)
// against central finite differences on every parameter, for every wiring the backward covers;
// gradient causality; a batch's gradient as the weighted sum of its sequences'; each planted
// gradient bug caught; one AdamW step by hand.
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "reference/decoder.hpp"
#include "reference/decoder_grad.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::reference;

ModelConfig tiny(Norm norm, Activation act, bool tied, Positional pos, bool scale) {
    ModelConfig c;
    c.vocab_size = 7;
    c.d_model = 8;
    c.n_heads = 2;
    c.d_ff = 12;
    c.n_layers = 2;
    c.max_len = 8;
    c.norm = norm;
    c.activation = act;
    c.tie_embeddings = tied;
    c.positional = pos;
    c.embed_scale_sqrt_d = scale;
    return c;
}

std::vector<Sequence> batch_of(std::uint64_t seed, const ModelConfig& c) {
    std::mt19937_64 rng(seed);
    std::vector<Sequence> batch;
    for (const std::size_t T : {5, 7}) {
        Sequence q;
        for (std::size_t t = 0; t < T; ++t) q.tokens.push_back(int(rng() % std::uint64_t(c.vocab_size)));
        for (std::size_t t = 0; t + 1 < T; ++t) q.weights.push_back(t % 3 == 1 ? 0.0 : 0.5 + double(rng() % 4));
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

TEST_CASE("the causal logits are reference::Decoder<double>'s", "[reference][grad]") {
    for (const Norm norm : {Norm::post, Norm::pre}) {
        const ModelConfig c = tiny(norm, Activation::gelu, false, Positional::learned, true);
        const Model m = init_model(c, 9);
        const std::vector<int> tokens = {1, 4, 0, 6, 2, 2};
        const std::vector<double> mine = decoder_logits(c, Params::from_model(m), tokens);
        const auto theirs = Decoder<double>(m).forward(tokens);
        REQUIRE(mine.size() == theirs.size());
        for (std::size_t i = 0; i < mine.size(); ++i) CHECK(std::abs(mine[i] - theirs.data()[i]) < 1e-12);
    }
}

// Untied embeddings, and tokens after position k that no earlier position holds: the rows of
// those tokens in the embedding's gradient are what the positions after k receive.
TEST_CASE("gradient causality: the loss of positions 0..k gives the tokens after k exactly nothing", "[reference][grad]") {
    const ModelConfig c = tiny(Norm::pre, Activation::gelu, false, Positional::sinusoidal, true);
    const Params p = Params::from_model(init_model(c, 3));
    const std::size_t k = 3;
    const Sequence q{{0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 0, 0, 0}};  // predicts tokens 1..k from positions 0..k-1
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
    ModelConfig rope = c;
    rope.positional = Positional::rope;
    CHECK_THROWS_WITH(check_trainable(rope), Catch::Contains("rope"));
    ModelConfig cross = c;
    cross.cross_attention = true;
    CHECK_THROWS_WITH(check_trainable(cross), Catch::Contains("cross_attention"));
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
