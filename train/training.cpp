// train/training.cpp — the task, the training loop and the evaluation of `attncheck train`
// (train/training.hpp).
#include "train/training.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "attncheck/error.hpp"

namespace attncheck::train {

using reference::Params;
using reference::Sequence;
using reference::TrainMask;

namespace {

// The batch is split in this many chunks whatever the thread count: the sum of their gradients,
// in chunk order, is the same on any machine.
constexpr int kChunks = 8;

// The batch's loss and gradient: the chunks' (each a weighted mean over its own positions)
// recombined into the weighted mean over the whole batch.
double batch_loss(const ModelConfig& c, const Params& p, const std::vector<Sequence>& batch, TrainMask mask, Params& grad) {
    std::vector<std::vector<Sequence>> chunks(kChunks);
    for (std::size_t i = 0; i < batch.size(); ++i) chunks[i % kChunks].push_back(batch[i]);
    std::vector<Params> grads(kChunks);
    std::vector<double> losses(kChunks, 0.0), weights(kChunks, 0.0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < kChunks; ++k) {
        if (chunks[std::size_t(k)].empty()) continue;
        for (const Sequence& q : chunks[std::size_t(k)])
            for (const double w : q.weights) weights[std::size_t(k)] += w;
        losses[std::size_t(k)] = reference::decoder_loss(c, p, chunks[std::size_t(k)], {mask, reference::GradBug::none},
                                                         &grads[std::size_t(k)]);
    }
    double total = 0, loss = 0;
    for (int k = 0; k < kChunks; ++k) total += weights[std::size_t(k)];
    grad = p.zeros_like();
    for (int k = 0; k < kChunks; ++k) {
        if (chunks[std::size_t(k)].empty()) continue;
        const double share = weights[std::size_t(k)] / total;
        loss += share * losses[std::size_t(k)];
        for (auto& [name, v] : grad.values) {
            const std::vector<double>& g = grads[std::size_t(k)].at(name);
            for (std::size_t i = 0; i < v.size(); ++i) v[i] += share * g[i];
        }
    }
    return loss;
}

// The optimized float32 step: the float64 weights rounded to a Model, its gradient widened.
double optimized_loss(const ModelConfig& c, const Params& p, const std::vector<Sequence>& batch, TrainMask mask,
                      const optimized::TrainKernel& kernel, optimized::Grads& g32, Params& grad) {
    const double loss = optimized::train_loss(p.to_model(c), batch, kernel, {.mask = mask}, &g32);
    grad = p.zeros_like();
    for (auto& [name, v] : grad.values) {
        const std::vector<float>& g = g32.at(name);
        std::copy(g.begin(), g.end(), v.begin());
    }
    return loss;
}

// Multiply-adds of one sequence's forward pass, counted from the shapes (the backward is twice it).
double forward_macs(const ModelConfig& c, double T) {
    const double d = c.d_model, f = c.d_ff, V = c.vocab_size;
    const double per_layer = 4 * T * d * d + 2 * T * T * d + 2 * T * d * f;
    return c.n_layers * per_layer + T * d * V;
}

int argmax(const double* row, int n) {
    int best = 0;
    for (int v = 1; v < n; ++v)
        if (row[v] > row[best]) best = v;  // strict: the lowest id wins ties
    return best;
}

}  // namespace

const char* to_string(Task t) { return t == Task::copy ? "copy" : t == Task::reverse ? "reverse" : "sort"; }

Task task_from_string(const std::string& s) {
    if (s == "copy") return Task::copy;
    if (s == "reverse") return Task::reverse;
    if (s == "sort") return Task::sort;
    throw InputError("--task " + s + ": expected copy, reverse or sort");
}

const char* to_string(Step s) { return s == Step::reference ? "reference" : "optimized"; }

Step step_from_string(const std::string& s) {
    if (s == "reference") return Step::reference;
    if (s == "optimized") return Step::optimized;
    throw InputError("--step " + s + ": expected reference or optimized");
}

Sequence make_example(const TaskSpec& t, std::mt19937_64& rng) {
    Sequence q;
    std::vector<int> prefix;
    for (int i = 0; i < t.length; ++i) prefix.push_back(int(rng() % std::uint64_t(t.alphabet)));
    q.tokens = prefix;
    q.tokens.push_back(t.separator());
    if (t.task == Task::reverse) std::reverse(prefix.begin(), prefix.end());
    if (t.task == Task::sort) std::sort(prefix.begin(), prefix.end());
    q.tokens.insert(q.tokens.end(), prefix.begin(), prefix.end());
    q.weights.assign(q.tokens.size() - 1, 1.0);
    return q;
}

std::vector<int> answer_of(const TaskSpec& t, const std::vector<int>& tokens) {
    return {tokens.begin() + t.length + 1, tokens.end()};
}

ModelConfig model_config(const TrainOptions& o) {
    ModelConfig c;
    c.vocab_size = o.task.vocab();
    c.d_model = o.d_model;
    c.n_heads = o.n_heads;
    c.d_ff = o.d_ff;
    c.n_layers = o.n_layers;
    c.max_len = o.task.sequence_length();
    c.norm = Norm::pre;
    c.activation = Activation::gelu;
    c.positional = Positional::sinusoidal;
    c.tie_embeddings = true;
    c.embed_scale_sqrt_d = false;
    c.validate();
    return c;
}

std::vector<int> generate(const ModelConfig& c, const Params& p, TrainMask mask, std::vector<int> prompt, int n) {
    std::vector<int> out;
    for (int s = 0; s < n; ++s) {
        const std::vector<double> logits = reference::decoder_logits(c, p, prompt, mask);  // [len, V]
        const int next = argmax(&logits[(prompt.size() - 1) * std::size_t(c.vocab_size)], c.vocab_size);
        prompt.push_back(next);
        out.push_back(next);
    }
    return out;
}

Evaluation evaluate(const ModelConfig& c, const Params& p, const TrainOptions& o, const std::vector<Sequence>& held_out) {
    const TaskSpec& t = o.task;
    const std::size_t V = std::size_t(c.vocab_size), k = std::size_t(t.length);
    std::vector<Evaluation> each(held_out.size());
#pragma omp parallel for schedule(dynamic, 4)
    for (std::size_t i = 0; i < held_out.size(); ++i) {
        const std::vector<int>& tokens = held_out[i].tokens;
        const std::vector<double> logits = reference::decoder_logits(c, p, tokens, o.mask);
        Evaluation& e = each[i];
        for (std::size_t pos = 0; pos + 1 < tokens.size(); ++pos) {
            const double* row = &logits[pos * V];
            const double mx = *std::max_element(row, row + V);
            double sum = 0;
            for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
            const double nll = mx + std::log(sum) - row[std::size_t(tokens[pos + 1])];
            e.loss += nll;
            if (pos >= k) {  // predicts an answer token (positions k .. 2k-1)
                e.answer_loss += nll;
                e.answer_accuracy += argmax(row, int(V)) == tokens[pos + 1] ? 1 : 0;
            }
        }
        const std::vector<int> prompt(tokens.begin(), tokens.begin() + std::ptrdiff_t(k + 1));
        const std::vector<int> got = generate(c, p, o.mask, prompt, int(k)), want = answer_of(t, tokens);
        int right = 0;
        for (std::size_t j = 0; j < k; ++j) right += got[j] == want[j] ? 1 : 0;
        e.generation_token_accuracy = right;
        e.generation_exact = right == int(k) ? 1 : 0;
    }
    Evaluation sum;
    for (const Evaluation& e : each) {
        sum.loss += e.loss;
        sum.answer_loss += e.answer_loss;
        sum.answer_accuracy += e.answer_accuracy;
        sum.generation_token_accuracy += e.generation_token_accuracy;
        sum.generation_exact += e.generation_exact;
    }
    const double n = double(held_out.size());
    sum.loss /= n * double(t.sequence_length() - 1);
    sum.answer_loss /= n * double(k);
    sum.answer_accuracy /= n * double(k);
    sum.generation_token_accuracy /= n * double(k);
    sum.generation_exact /= n;
    return sum;
}

TrainResult train(const TrainOptions& o, const std::function<void(int, double)>& progress) {
    if (o.task.length < 1 || o.task.length > 32) throw InputError("--length: expected 1 .. 32 prefix symbols");
    if (o.task.alphabet < 2 || o.task.alphabet > 64) throw InputError("--alphabet: expected 2 .. 64 symbols");
    if (o.steps < 1 || o.batch < 1 || o.eval_size < 1 || o.eval_every < 1)
        throw InputError("--steps, --batch, --eval-size and --eval-every must be at least 1");
    TrainResult r;
    r.config = model_config(o);
    reference::check_trainable(r.config);
    r.params = Params::from_model(init_model(r.config, o.seed));
    // Training and held-out examples from separate streams of the seed.
    std::mt19937_64 train_rng(o.seed * 2 + 1), eval_rng(o.seed * 2 + 2);
    std::vector<Sequence> held_out;
    for (int i = 0; i < o.eval_size; ++i) held_out.push_back(make_example(o.task, eval_rng));
    reference::AdamW opt;
    opt.lr = o.lr;
    // The optimized step counts its own (train_flops: causal attention over the visible pairs).
    r.flops_per_step = 2 * 3 * forward_macs(r.config, o.task.sequence_length()) * o.batch;
    optimized::Grads g32;  // the optimized step's float32 gradient, its storage kept from step to step
    for (int step = 1; step <= o.steps; ++step) {
        std::vector<Sequence> batch;
        for (int i = 0; i < o.batch; ++i) batch.push_back(make_example(o.task, train_rng));
        // A linear warmup over the first 5% of the steps, then cosine decay to 10%.
        const double warm = std::max(1.0, 0.05 * o.steps), x = double(step);
        opt.lr = o.lr * (x < warm ? x / warm : 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * (x - warm) / std::max(1.0, o.steps - warm))));
        const auto t0 = std::chrono::steady_clock::now();
        Params grad;
        const double loss = o.step == Step::reference ? batch_loss(r.config, r.params, batch, o.mask, grad)
                                                      : optimized_loss(r.config, r.params, batch, o.mask, o.kernel, g32, grad);
        if (step == 1 && o.step == Step::optimized) r.flops_per_step = optimized::train_flops(r.config, batch, o.mask);
        opt.step(r.params, grad);
        r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CurvePoint point;
        point.step = step;
        point.train_loss = loss;
        if (step % o.eval_every == 0 || step == o.steps) {
            point.evaluated = true;
            point.eval = evaluate(r.config, r.params, o, held_out);
        }
        r.curve.push_back(point);
        if (progress) progress(step, loss);
    }
    r.final_eval = r.curve.back().eval;
    return r;
}

}  // namespace attncheck::train
