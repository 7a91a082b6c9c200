// cli/train_command.cpp — `attncheck train`: a small decoder trained on a task whose answer needs
// the past, with the causal mask and without it, side by side (train/training.hpp; the worked
// example is docs/training.md). For each run: the teacher-forced loss and accuracy, step-by-step
// generation, and logits_causality on the trained model as it was trained (the run without the
// mask fails it, with its shrunk case); the training step's throughput (steps/s, GFLOP/s and the
// fraction of this machine's FMA peak), of the float64 reference step or, with --step optimized,
// the float32 step around a registry kernel's forward and backward (--kernel); --json with the
// curves, --out the trained weights in the model format.
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>
#include <rapidcheck.h>

#include "attncheck/error.hpp"
#include "attncheck/isa.hpp"
#include "cli/commands.hpp"
#include "kernels/registry.hpp"
#include "perf/calibration.hpp"
#include "properties/fuzz_report.hpp"
#include "properties/runner.hpp"
#include "train/training.hpp"

namespace attncheck::cli {
namespace {

using reference::TrainMask;

struct TrainArgs {
    std::string mask = "both", task = "sort", out, json, step = "reference", kernel = "optimized_v2";
    bool kernel_given = false;
    int length = 6, alphabet = 8, steps = 1500, batch = 32, eval_every = 100;
    double lr = 3e-3;
    std::uint64_t seed = 1;
    bool progress = false;
};

// logits_causality on the model as trained: for a sequence, a row i and a later position j,
// changing the token at j leaves the logits of rows 0..i bit for bit unchanged.
properties::PropertyResult causality(const ModelConfig& c, const reference::Params& p, TrainMask mask, std::uint64_t seed) {
    return properties::run_property(
        "logits_causality",
        [&]() -> properties::Verdict {
            const int T = *rc::gen::inRange(2, c.max_len + 1).as("T");
            const std::vector<int> tokens = *rc::gen::container<std::vector<int>>(std::size_t(T), rc::gen::inRange(0, c.vocab_size)).as("tokens");
            const int i = *rc::gen::inRange(0, T - 1).as("row i");
            const int j = *rc::gen::inRange(i + 1, T).as("changed position j");
            const int shift = *rc::gen::inRange(1, c.vocab_size).as("token change");
            std::vector<int> changed = tokens;
            changed[std::size_t(j)] = (changed[std::size_t(j)] + shift) % c.vocab_size;
            const std::vector<double> a = reference::decoder_logits(c, p, tokens, mask);
            const std::vector<double> b = reference::decoder_logits(c, p, changed, mask);
            const std::size_t V = std::size_t(c.vocab_size);
            for (std::size_t r = 0; r <= std::size_t(i); ++r)
                for (std::size_t v = 0; v < V; ++v)
                    if (a[r * V + v] != b[r * V + v]) {
                        std::ostringstream s;
                        s << std::setprecision(9) << "the logits of row " << r << " changed when the token at position " << j
                          << " (after it) changed: logit[" << r << ", " << v << "] " << a[r * V + v] << " -> " << b[r * V + v];
                        return properties::Verdict::fail(s.str());
                    }
            return properties::Verdict::pass();
        },
        properties::RunParams(seed, 100, 5.0));
}

nlohmann::json eval_json(const train::Evaluation& e) {
    return {{"loss", e.loss},
            {"answer_loss", e.answer_loss},
            {"answer_accuracy", e.answer_accuracy},
            {"generation_token_accuracy", e.generation_token_accuracy},
            {"generation_exact", e.generation_exact}};
}

std::string out_path(const std::string& out, TrainMask mask, bool both) {
    if (!both) return out;
    const std::size_t dot = out.rfind('.');
    const std::string suffix = std::string("-") + reference::to_string(mask);
    return dot == std::string::npos || out.find('/', dot) != std::string::npos ? out + suffix
                                                                                : out.substr(0, dot) + suffix + out.substr(dot);
}

struct Run {
    TrainMask mask;
    train::TrainResult result;
    properties::PropertyResult causal;
    double gflops = 0;
};

std::string fixed(double v, int digits) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(digits) << v;
    return s.str();
}

int run(const TrainArgs& a) {
    std::vector<TrainMask> masks;
    if (a.mask == "causal" || a.mask == "both") masks.push_back(TrainMask::causal);
    if (a.mask == "none" || a.mask == "both") masks.push_back(TrainMask::none);
    if (masks.empty()) throw InputError("--mask " + a.mask + ": expected causal, none or both");
    train::TrainOptions o;
    o.task.task = train::task_from_string(a.task);
    o.task.length = a.length;
    o.task.alphabet = a.alphabet;
    o.seed = a.seed;
    o.steps = a.steps;
    o.batch = a.batch;
    o.lr = a.lr;
    o.eval_every = a.eval_every;
    if (!(a.lr > 0 && a.lr < 1)) throw InputError("--lr " + std::to_string(a.lr) + ": expected a value in (0, 1)");
    o.step = train::step_from_string(a.step);
    if (o.step == train::Step::reference && a.kernel_given)
        throw InputError("--kernel " + a.kernel + ": only the optimized step takes a kernel (--step optimized)");
    if (o.step == train::Step::optimized) {
        const KernelEntry* e = find_kernel(a.kernel);
        if (!e || !e->fn_v2 || !e->backward_v2) {
            std::string known;  // the registry's kernels the step can take, the backward zoo's mutants included
            for (const KernelEntry& k : kernel_registry())
                if (k.fn_v2 && k.backward_v2) known += " " + k.name;
            throw InputError("--kernel " + a.kernel + ": " +
                             (e ? "has no version 2 backward pass" : std::string("no such kernel")) +
                             " (the optimized step takes:" + known + ")");
        }
        o.kernel = {e->fn_v2, e->backward_v2};
    }
    const std::string step_name = o.step == train::Step::reference ? std::string("reference (float64)")
                                                                   : "optimized (float32, kernel " + a.kernel + ")";
    // Every file the run writes, checked before minutes of training (fuzz_report.hpp's unwritable).
    std::vector<std::pair<std::string, std::string>> outputs;
    if (!a.json.empty()) outputs.emplace_back("--json", a.json);
    if (!a.out.empty())
        for (const TrainMask mask : masks) outputs.emplace_back("--out", out_path(a.out, mask, masks.size() > 1));
    for (const auto& [flag, path] : outputs)
        if (const std::string why = properties::unwritable(path); !why.empty()) throw InputError(flag + " " + path + ": " + why);
    const int threads = omp_get_max_threads();
    std::cout << "attncheck train: task " << a.task << " (" << a.length << " symbols of " << a.alphabet
              << ", a separator, the answer), seed " << a.seed << ", " << a.steps << " steps of " << a.batch
              << " sequences, step " << step_name << ", " << threads << " threads; " << isa_line() << std::endl;
    const bool show = a.progress || isatty(2);
    std::vector<Run> runs;
    for (const TrainMask mask : masks) {
        o.mask = mask;
        Run r{mask, {}, {}, 0};
        const std::string label = std::string("[mask ") + reference::to_string(mask) + "]";
        r.result = train::train(o, [&](int step, double loss) {
            if (show && (step % 10 == 0 || step == o.steps)) {
                const int width = 30, done = int(double(step) / o.steps * width);
                std::fprintf(stderr, "%s%s [%s%s] %d/%d loss %.4f%s", isatty(2) ? "\r\033[K" : "", label.c_str(),
                             std::string(std::size_t(done), '#').c_str(), std::string(std::size_t(width - done), '.').c_str(),
                             step, o.steps, loss, isatty(2) ? "" : "\n");
                std::fflush(stderr);
            }
        });
        if (show && isatty(2)) std::fprintf(stderr, "\r\033[K");
        r.gflops = r.result.flops_per_step * o.steps / r.result.seconds / 1e9;
        r.causal = causality(r.result.config, r.result.params, mask, a.seed);
        if (!a.out.empty()) save_model(r.result.params.to_model(r.result.config), out_path(a.out, mask, masks.size() > 1));
        runs.push_back(std::move(r));
    }
    const double peak = perf::fma_peak_gflops(threads);

    // The table: one column per run.
    const auto row = [&](const std::string& name, const auto& value) {
        std::cout << std::left << std::setw(34) << name;
        for (const Run& r : runs) std::cout << std::setw(16) << value(r);
        std::cout << "\n";
    };
    std::cout << "\n";
    row("", [](const Run& r) { return std::string("mask ") + reference::to_string(r.mask); });
    row("teacher-forced loss (all)", [](const Run& r) { return fixed(r.result.final_eval.loss, 4); });
    row("teacher-forced loss (answer)", [](const Run& r) { return fixed(r.result.final_eval.answer_loss, 4); });
    row("teacher-forced answer accuracy", [](const Run& r) { return fixed(r.result.final_eval.answer_accuracy, 3); });
    row("generation accuracy (tokens)", [](const Run& r) { return fixed(r.result.final_eval.generation_token_accuracy, 3); });
    row("generation accuracy (whole answer)", [](const Run& r) { return fixed(r.result.final_eval.generation_exact, 3); });
    row("logits_causality", [](const Run& r) {
        return r.causal.status == properties::Status::pass ? "pass " + std::to_string(r.causal.cases)
                                                           : std::string(properties::to_string(r.causal.status)) + " @" +
                                                                 std::to_string(r.causal.failed_at);
    });
    row("training steps/s", [&](const Run& r) { return fixed(o.steps / r.result.seconds, 2); });
    row(o.step == train::Step::reference ? "training step GFLOP/s (float64)" : "training step GFLOP/s (float32)",
        [](const Run& r) { return fixed(r.gflops, 2); });
    row("fraction of the fp32 FMA peak", [&](const Run& r) { return fixed(r.gflops / peak, 4); });
    std::cout << "(the fp32 FMA peak measured now: " << fixed(peak, 1) << " GFLOP/s on " << threads << " threads; "
              << (o.step == train::Step::reference ? "the step is the float64 reference, whose peak is half of it)\n"
                                                   : "the step is the optimized float32 one)\n");
    for (const Run& r : runs)
        if (r.causal.status != properties::Status::pass)
            std::cout << "\nlogits_causality FAILS on the model trained with mask " << reference::to_string(r.mask)
                      << " (shrunk case):\n"
                      << r.causal.counterexample << "  " << r.causal.message << "\n";

    if (!a.json.empty()) {
        nlohmann::json j;
        j["task"] = {{"task", a.task}, {"length", a.length}, {"alphabet", a.alphabet}};
        j["seed"] = a.seed;
        j["steps"] = a.steps;
        j["batch"] = a.batch;
        j["lr"] = a.lr;
        j["threads"] = threads;
        j["step"] = a.step;
        if (o.step == train::Step::optimized) j["kernel"] = a.kernel;
        j["isa"] = isa_line();
        j["fma_peak_gflops_fp32"] = peak;
        for (const Run& r : runs) {
            nlohmann::json rj;
            rj["final"] = eval_json(r.result.final_eval);
            rj["logits_causality"] = {{"status", properties::to_string(r.causal.status)},
                                      {"cases", r.causal.cases},
                                      {"failed_at", r.causal.failed_at},
                                      {"counterexample", r.causal.counterexample},
                                      {"message", r.causal.message}};
            rj["seconds"] = r.result.seconds;
            rj["steps_per_s"] = o.steps / r.result.seconds;
            rj["gflops"] = r.gflops;
            rj["frac_fma_peak_fp32"] = r.gflops / peak;
            rj["curve"] = nlohmann::json::array();
            for (const train::CurvePoint& pt : r.result.curve) {
                nlohmann::json c = {{"step", pt.step}, {"train_loss", pt.train_loss}};
                if (pt.evaluated) c["eval"] = eval_json(pt.eval);
                rj["curve"].push_back(c);
            }
            if (!a.out.empty()) rj["checkpoint"] = out_path(a.out, r.mask, runs.size() > 1);
            j["runs"][reference::to_string(r.mask)] = rj;
        }
        if (!properties::write_file(a.json, j.dump(2) + "\n")) throw InputError("--json " + a.json + ": cannot write");
    }
    return 0;
}

}  // namespace

Command add_train_command(CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    CLI::App* sub = app.add_subcommand(
        "train", "Train a small decoder on a task that needs the past, with and without the causal mask, and compare");
    sub->add_option("--mask", a->mask, "causal, none, or both side by side (default both)")->type_name("M");
    sub->add_option("--task", a->task,
                    "After the separator, the prefix sorted (sort, the default), again (copy) or reversed (reverse)")
        ->type_name("T");
    sub->add_option("--length", a->length, "Prefix symbols (default 6)")->type_name("K");
    sub->add_option("--alphabet", a->alphabet, "Distinct symbols (default 8)")->type_name("A");
    sub->add_option("--seed", a->seed, "Seed of the weights and the examples (default 1)")->type_name("S");
    sub->add_option("--steps", a->steps, "Optimizer steps (default 1500)")->type_name("N");
    sub->add_option("--batch", a->batch, "Sequences per step (default 32)")->type_name("B");
    sub->add_option("--lr", a->lr, "Peak learning rate of AdamW (default 3e-3; warmup, then cosine decay)")->type_name("LR");
    sub->add_option("--eval-every", a->eval_every, "Steps between evaluations on 200 held-out examples (default 100)")
        ->type_name("N");
    sub->add_option("--out", a->out,
                    "Write the trained weights as a model file (.safetensors; with --mask both, -causal and -none "
                    "before the extension)")
        ->type_name("FILE");
    sub->add_option("--json", a->json, "Write the results and the curves as JSON (plot: tools/plot_training.py)")
        ->type_name("FILE");
    sub->add_option("--step", a->step,
                    "The training step: reference (float64, the default) or optimized (float32, attention by --kernel)")
        ->type_name("S");
    sub->add_option_function<std::string>(
           "--kernel",
           [a](const std::string& k) {
               a->kernel = k;
               a->kernel_given = true;
           },
           "The optimized step's attention: a registry kernel of version 2 with a backward (default optimized_v2)")
        ->type_name("NAME");
    sub->add_flag("--progress", a->progress, "A progress line on stderr even when it is not a terminal");
    sub->footer(
        "The model: pre-norm, GELU, sinusoidal positions, tied embeddings, d=32, h=4, f=64, L=2; trained by the "
        "float64 reference gradients (reference/decoder_grad.hpp), or with --step optimized the float32 step "
        "(optimized/train_step.hpp), with AdamW on float64 weights. docs/training.md explains what to look "
        "at. The checkpoint is the weights only: logits, explain and generate run it as MODEL.md's decoder, with "
        "the causal mask.");
    return {sub, [a] { return run(*a); }};
}

}  // namespace attncheck::cli
