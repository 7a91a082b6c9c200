// reference/decoder_grad.hpp — the gradients of the whole decoder of docs/spec/MODEL.md for
// teacher-forced next-token prediction, in float64, written to be read: the oracle of a training
// step, checked against finite differences (tests/reference/decoder_grad_test.cpp).
//
// The loss of a batch of sequences is the weighted mean, over every position t of every
// sequence, of the cross-entropy of the logits of position t against the token at t + 1:
//     loss = sum_{s,t} w[s][t] * (-log softmax(logits_s[t])[tokens_s[t+1]]) / sum_{s,t} w[s][t]
// (w selects the positions that count: a task's answer only, or every position).
//
// Every step of the forward pass of reference/decoder.hpp has its backward here, in the order the
// chain rule takes them (llm.c's layout: one function per layer kind, each with its forward and
// backward side by side): cross-entropy, logits (tied or not), the final LayerNorm (pre-norm),
// per layer the feed-forward and the masked self-attention with their LayerNorms and residuals
// (post or pre), the positions (learned) and the embeddings (scaled or not).
//
// Not here yet: cross-attention and the version 2 features (grouped-query heads, the sliding
// window, rotary positions): check_trainable() refuses such a config, naming the feature.
//
// The self-attention mask is a parameter: `causal` is MODEL.md's decoder; `none` lets every
// position see every other, which is what a decoder trained without the mask computes (the
// training demo of `attncheck train` shows what that does to a model).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "attncheck/model.hpp"

namespace attncheck::reference {

// The parameters of a model in float64, by the model's tensor names (lm_head.weight absent when
// tied: the embedding is the lm head), each row-major with the shape of expected_tensors().
struct Params {
    std::map<std::string, std::vector<double>> values;
    std::map<std::string, std::vector<std::size_t>> shapes;

    static Params from_model(const Model& m);
    // The same names and shapes, every value 0.
    Params zeros_like() const;
    // The model of config c with these values rounded to float32.
    Model to_model(const ModelConfig& c) const;
    std::vector<double>& at(const std::string& name);
    const std::vector<double>& at(const std::string& name) const;
    std::size_t count() const;  // the number of scalars
};

enum class TrainMask { causal, none };
const char* to_string(TrainMask m);

// Bugs planted in the backward pass, for the properties that must catch them (every one of them
// leaves the forward pass and the loss exact: only the gradients are wrong).
enum class GradBug {
    none,
    layer_norm_mean_dropped,   // LayerNorm's backward forgets the mean of the upstream gradient
    tied_embedding_once,       // tied weights: the lm head's gradient never reaches the embedding
    position_shifted,          // a learned position's gradient lands on the next position
    softmax_rowsum_dropped,    // attention's softmax backward: dS = P * dP, without - rowsum(P*dP)
    residual_dropped,          // the residual path of the first sublayer carries no gradient
    mask_ignored_in_backward,  // the backward recomputes P without the causal mask
    loss_not_normalised,       // the loss is a mean, its gradient a sum (not divided by the weight)
};
const char* to_string(GradBug b);
std::vector<GradBug> all_grad_bugs();  // every bug but none

// One training sequence: its tokens and, for t = 0 .. T-2, the weight of predicting tokens[t+1]
// from position t (0: the position does not count).
struct Sequence {
    std::vector<int> tokens;
    std::vector<double> weights;  // T - 1
};

// Throws InputError when the config has a feature this backward does not have (cross-attention,
// grouped-query heads, a window, rotary positions), naming it.
void check_trainable(const ModelConfig& c);

// The logits [T, V] (row-major) of one sequence, with the given self-attention mask. With
// TrainMask::causal this is reference::Decoder<double>::forward.
std::vector<double> decoder_logits(const ModelConfig& c, const Params& p, const std::vector<int>& tokens,
                                   TrainMask mask = TrainMask::causal);

// What decoder_loss checks before it computes anything: check_trainable(c), then the batch
// (below); returns the batch's total weight (> 0). Shared with every other implementation of
// the same loss (optimized/train_step.hpp), so that they refuse exactly what this one refuses.
double check_batch(const ModelConfig& c, const std::vector<Sequence>& batch);

struct LossOptions {
    TrainMask mask = TrainMask::causal;
    GradBug bug = GradBug::none;
};

// The batch's loss (above); when grad is given, sets it to the gradient of the loss with respect
// to every parameter (grad gets p's names and shapes). Throws InputError for a bad batch (an
// empty one, a token out of range, a sequence longer than max_len or shorter than 2, weights of
// the wrong length or negative, all weights 0).
double decoder_loss(const ModelConfig& c, const Params& p, const std::vector<Sequence>& batch, const LossOptions& o = {},
                    Params* grad = nullptr);

// AdamW (Loshchilov & Hutter) with the gradient clipped to a global L2 norm first, as PyTorch's
// clip_grad_norm_ then AdamW: decoupled weight decay on the matrices only (not on biases,
// LayerNorm weights or positions).
struct AdamW {
    double lr = 3e-3, beta1 = 0.9, beta2 = 0.98, eps = 1e-8, weight_decay = 0.01, clip_norm = 1.0;
    long step_count = 0;
    Params m, v;  // first and second moments, made on the first step
    // One step on p with gradient g; returns the gradient's L2 norm before clipping.
    double step(Params& p, const Params& g);
};

}  // namespace attncheck::reference
