// train/training.hpp — teacher forcing, measured: a small decoder trained on a synthetic task
// whose answer needs the past, with or without the causal mask (`attncheck train`,
// docs/training.md).
//
// The task: a prefix of random symbols, a separator, then the prefix sorted (sort), again (copy)
// or reversed (reverse). Every position is trained to predict the next token (the standard language-model
// loss); only the answer (the tokens after the separator) can be predicted from the past. With
// the mask, the model must learn to look back at the prefix. Without it, position t also sees
// token t + 1, the very token it must predict: the model learns to read it, its teacher-forced
// loss falls towards zero everywhere, and step-by-step generation, which has no token t + 1 to
// read, fails.
//
// The training step is, by default, the float64 reference (reference/decoder_grad.hpp): the batch
// is split in a fixed number of chunks, one OpenMP task each, summed in chunk order, so a run's
// numbers do not depend on the thread count. Or the optimized float32 step
// (optimized/train_step.hpp) with a version 2 kernel's forward and backward: the master weights
// stay float64 with the same AdamW; each step rounds them to float32 for the step and widens its
// gradient back. Its numbers are the same for a given thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attncheck/model.hpp"
#include "optimized/train_step.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::train {

enum class Task { copy, reverse, sort };
const char* to_string(Task t);
Task task_from_string(const std::string& s);  // throws InputError naming the choices

struct TaskSpec {
    Task task = Task::sort;
    int length = 6;    // k: prefix symbols
    int alphabet = 8;  // symbols 0 .. alphabet-1; the separator is token `alphabet`
    int vocab() const { return alphabet + 1; }
    int sequence_length() const { return 2 * length + 1; }  // k symbols, separator, k answers
    int separator() const { return alphabet; }
};

// One example: the tokens, and weight 1 on every position (the language-model loss).
reference::Sequence make_example(const TaskSpec& t, std::mt19937_64& rng);
// The answer of an example: the k tokens after the separator.
std::vector<int> answer_of(const TaskSpec& t, const std::vector<int>& tokens);

// Which implementation computes a step's loss and gradient.
enum class Step { reference, optimized };
const char* to_string(Step s);
Step step_from_string(const std::string& s);  // throws InputError naming the choices

struct TrainOptions {
    TaskSpec task;
    reference::TrainMask mask = reference::TrainMask::causal;
    Step step = Step::reference;
    optimized::TrainKernel kernel;  // the optimized step's attention (the reference step has its own)
    std::uint64_t seed = 1;
    int steps = 1500;
    int batch = 32;
    double lr = 3e-3;
    int eval_every = 100;  // steps between evaluations on the held-out set
    int eval_size = 200;   // held-out examples
    // The model: d, h, f, L (V and max_len follow from the task).
    int d_model = 32, n_heads = 4, d_ff = 64, n_layers = 2;
};

// The config a TrainOptions trains: pre-norm, GELU, sinusoidal positions, tied embeddings.
ModelConfig model_config(const TrainOptions& o);

// What a model does on the held-out set, with the mask it was trained with.
struct Evaluation {
    double loss = 0;             // teacher-forced, every position
    double answer_loss = 0;      // teacher-forced, the answer's positions only
    double answer_accuracy = 0;  // teacher-forced: argmax = the next token, on the answer's positions
    double generation_token_accuracy = 0;  // greedy, one token at a time from prefix + separator
    double generation_exact = 0;           // the whole answer right
};
Evaluation evaluate(const ModelConfig& c, const reference::Params& p, const TrainOptions& o,
                    const std::vector<reference::Sequence>& held_out);

struct CurvePoint {
    int step = 0;
    double train_loss = 0;  // the batch's loss at this step
    bool evaluated = false;
    Evaluation eval;  // when evaluated
};

struct TrainResult {
    ModelConfig config;
    reference::Params params;
    std::vector<CurvePoint> curve;
    Evaluation final_eval;
    double seconds = 0;           // training steps only (the optimizer's included)
    double flops_per_step = 0;    // the step's multiply-adds x 2, counted from the shapes
};

// Trains; progress(step, loss) after every step. Deterministic in (options) on any thread count.
TrainResult train(const TrainOptions& o, const std::function<void(int, double)>& progress = {});

// Greedy generation from `prompt` with the model's mask, n new tokens (the lowest id on ties).
std::vector<int> generate(const ModelConfig& c, const reference::Params& p, reference::TrainMask mask,
                          std::vector<int> prompt, int n);

}  // namespace attncheck::train
