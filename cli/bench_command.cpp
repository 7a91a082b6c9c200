// cli/bench_command.cpp — `attncheck bench`: the speed of one attention kernel (a built-in or a
// symbol of the user's shared library) on the standard shapes, as fractions of this machine's
// peaks measured in the same process, optionally against a baseline kernel timed interleaved
// with it, with a verdict; the flags and their checks are here, the measurements in
// bench_run.cpp, the table and the JSON in bench_report.cpp.
//
// How idle OpenMP workers wait decides the timings (bench/main.cpp measured it: a decode step
// opens dozens of short parallel regions; sleeping workers cost a futex wake-up per region, and
// spinning without end wrecks every timing when anything else runs on the machine). As the
// benchmark binary does, `attncheck bench` re-executes itself with GOMP_SPINCOUNT=10000 when the
// caller set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (libgomp reads them once, at load time).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <omp.h>

#include "attncheck/error.hpp"
#include "cli/bench_run.hpp"
#include "cli/commands.hpp"
#include "kernels/registry.hpp"
#include "perf/omp_wait.hpp"
#include "properties/isolation/kernel_lib.hpp"

namespace attncheck::cli {
namespace {

constexpr int kExitFailed = 1;

struct BenchArgs {
    std::string kernel, kernel_lib, symbol;
    std::string baseline_kernel, baseline_lib, baseline_symbol;
    std::string shapes;
    int threads = 0;  // 0: all OpenMP threads
    int reps = 7;
    double min_time = 0.2, max_slowdown = 0.10, min_frac_peak = 0;
    std::string json;
    bool allow_unjudged = false;
    bool backward = false;
};

std::string builtin_names() {
    std::string names;
    for (const KernelEntry* e : kernels_of(KernelRole::builtin))
        if (e->fn) names += (names.empty() ? "" : ", ") + e->name;
    return names;
}

// The kernel its flags name: --kernel, or --kernel-lib with --symbol (--baseline-kernel, or
// --baseline-lib with --baseline-symbol for the baseline), of ABI version 1 or 2; nullopt when
// none is given.
std::optional<bench::Kernel> pick_kernel(bool baseline, const std::string& name, const std::string& lib,
                                         const std::string& symbol) {
    const std::string kflag = baseline ? "--baseline-kernel" : "--kernel";
    const std::string lflag = baseline ? "--baseline-lib" : "--kernel-lib";
    const std::string sflag = baseline ? "--baseline-symbol" : "--symbol";
    if (!name.empty() && !lib.empty()) throw InputError(kflag + " and " + lflag + " name two kernels: give one");
    if (!lib.empty() && symbol.empty()) throw InputError(lflag + " needs " + sflag + " NAME");
    if (lib.empty() && !symbol.empty()) throw InputError(sflag + " needs " + lflag + " PATH");
    // A version 2 kernel is timed in the first dtype its declaration allows (bench::Kernel).
    const auto v2_kernel = [](std::string label, attncheck_kernel_v2_fn fn, attncheck_kernel_v2_backward_fn backward,
                              const std::string& declaration) {
        KernelDeclaration d = KernelDeclaration::parse(declaration);
        d.set_backward(backward != nullptr);
        return bench::Kernel{.label = std::move(label), .fn_v2 = fn, .backward = d.backward ? backward : nullptr,
                             .declaration = d, .dtype = bench::bench_dtype(d)};
    };
    if (!lib.empty()) {
        const properties::LoadedKernel lk = properties::load_kernel_library(lib, symbol);
        if (lk.fn_v2) return v2_kernel(lib + ":" + symbol, lk.fn_v2, lk.backward_v2, lk.declaration);
        return bench::Kernel{.label = lib + ":" + symbol, .fn = lk.fn};
    }
    if (name.empty()) return std::nullopt;
    const KernelEntry* e = find_kernel(name, KernelRole::builtin);
    if (!e) throw InputError(kflag + " " + name + ": not a built-in kernel (expected one of " + builtin_names() + ")");
    if (e->fn_v2) return v2_kernel(e->name, e->fn_v2, e->backward_v2, e->declaration);
    return bench::Kernel{.label = e->name, .fn = e->fn};
}

// "prefill-512, prefill-2048, ...": the standard shapes' names.
std::string shape_names() {
    std::string all;
    for (const perf::KernelShape& s : perf::standard_shapes()) all += (all.empty() ? "" : ", ") + s.name;
    return all;
}

// --backward times the passes of training: a decode step (one new row against a KV cache) has no
// backward, so the default is every shape but the decode ones, and a decode shape is refused.
std::vector<perf::KernelShape> parse_shapes(const std::string& list, bool backward) {
    if (list.empty()) {
        std::vector<perf::KernelShape> shapes;
        for (const perf::KernelShape& s : perf::standard_shapes())
            if (!backward || !s.decode) shapes.push_back(s);
        return shapes;
    }
    const std::string all = shape_names();  // for the messages below
    std::vector<perf::KernelShape> shapes;
    // Split at every comma, so that "a,", ",a" and "a,,b" show their empty names.
    std::vector<std::string> names(1);
    for (char c : list) {
        if (c == ',')
            names.emplace_back();
        else
            names.back().push_back(c);
    }
    for (const std::string& name : names) {
        if (name.empty()) throw InputError("--shapes '" + list + "': an empty shape name (expected a comma list of " + all + ")");
        const perf::KernelShape* s = perf::find_shape(name);
        if (!s) throw InputError("--shapes: unknown shape '" + name + "' (expected a comma list of " + all + ")");
        if (backward && s->decode)
            throw InputError("--shapes " + name + " with --backward: a decode step (one new row against a KV cache) "
                             "has no backward pass; the backward is timed on the other shapes");
        bool seen = false;
        for (const auto& x : shapes) seen |= x.name == name;
        if (!seen) shapes.push_back(*s);
    }
    return shapes;
}

// Creates (or truncates) the JSON file before the run, so that a bad path is exit 2 at once.
void check_writable(const std::string& path) {
    if (path.empty()) return;
    std::ofstream out(path);
    if (!out) throw InputError("--json " + path + ": cannot write the file");
}

// With --backward, a kernel without a backward pass is bad usage.
void check_has_backward(const bench::Kernel& k, const char* role) {
    if (k.backward) return;
    std::string why = k.fn_v2 ? "has no backward entry point (a library exports it as <symbol>_backward), or declares backward=no"
                              : "is of ABI version 1, which has no backward pass";
    throw InputError(std::string("--backward: the ") + role + " " + k.label + " " + why);
}

bench::Options options_of(const BenchArgs& a) {
    bench::Options o;
    o.backward = a.backward;
    const auto candidate = pick_kernel(false, a.kernel, a.kernel_lib, a.symbol);
    if (candidate) {
        o.candidate = *candidate;
    } else {
        // The default: the optimized kernel of the pass (the backward is version 2's).
        o.candidate = *pick_kernel(false, a.backward ? "optimized_v2" : "optimized", "", "");
    }
    o.baseline = pick_kernel(true, a.baseline_kernel, a.baseline_lib, a.baseline_symbol);
    if (o.backward) {
        check_has_backward(o.candidate, "kernel");
        if (o.baseline) check_has_backward(*o.baseline, "baseline");
    }
    o.shapes = parse_shapes(a.shapes, a.backward);
    o.threads = a.threads > 0 ? a.threads : omp_get_max_threads();
    o.reps = a.reps;
    o.min_time = a.min_time;
    o.max_slowdown = a.max_slowdown;
    o.allow_unjudged = a.allow_unjudged;
    if (a.min_frac_peak > 0) o.min_frac_peak = a.min_frac_peak;
    o.json = a.json;
    check_writable(o.json);
    return o;
}

int run(const BenchArgs& a) {
    const bench::Options o = options_of(a);
    bench::Result r;
    try {
        r = bench::run(o);
    } catch (const bench::Refusal& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "attncheck bench: %s\n", e.message.c_str());
        return kExitFailed;
    }
    bench::print_report(o, r);
    if (!o.json.empty()) {
        bench::write_json(o, r, o.json);
        std::printf("wrote %s\n", o.json.c_str());
    }
    return r.failed ? kExitFailed : 0;
}

void add_kernel_options(CLI::App* sub, BenchArgs& a) {
    sub->add_option("--kernel", a.kernel, "A built-in kernel to time (" + builtin_names() + "; default optimized)")
        ->type_name("NAME");
    sub->add_option("--kernel-lib", a.kernel_lib, "Time a kernel from this shared library (with --symbol), in process")
        ->type_name("PATH");
    sub->add_option("--symbol", a.symbol, "The kernel's exported (extern \"C\") symbol in --kernel-lib")
        ->type_name("NAME");
    sub->add_option("--baseline-kernel", a.baseline_kernel, "A built-in kernel to compare with, timed interleaved")
        ->type_name("NAME");
    sub->add_option("--baseline-lib", a.baseline_lib, "A baseline kernel from a shared library (with --baseline-symbol)")
        ->type_name("PATH");
    sub->add_option("--baseline-symbol", a.baseline_symbol, "The baseline's symbol in --baseline-lib")->type_name("NAME");
}

void add_run_options(CLI::App* sub, BenchArgs& a) {
    sub->add_option("--shapes", a.shapes,
                    "Comma list of shapes (default all): " + shape_names())
        ->type_name("S[,S...]");
    sub->add_option("--threads", a.threads, "OpenMP threads (default: all, " + std::to_string(omp_get_max_threads()) + ")")
        ->check(CLI::Range(1, 4096))->type_name("N");
    sub->add_option("--reps", a.reps, "Repetitions per shape and kernel (default 7)")->check(CLI::Range(1, 1000))
        ->type_name("N");
    sub->add_option("--min-time", a.min_time, "Seconds of calls per repetition, at least (default 0.2)")
        ->check(CLI::Range(1e-4, 60.0))->type_name("SECONDS");
    sub->add_option("--max-slowdown", a.max_slowdown,
                    "With a baseline: a shape whose median time ratio exceeds 1 + this, with sign-test p < 0.05, "
                    "fails (default 0.10)")
        ->check(CLI::Range(0.0, 100.0))->type_name("FRACTION");
    sub->add_option("--min-frac-peak", a.min_frac_peak,
                    "A shape whose median reaches less than this fraction of its bound (FMA peak; for decode the "
                    "rate of reading its K/V copies, DRAM's where they exceed the last-level cache) fails")
        ->check(CLI::Range(1e-6, 10.0))->type_name("FRACTION");
    sub->add_option("--json", a.json, "Write the results as Google-Benchmark-shaped JSON (tools/perf_gate.py reads it)")
        ->type_name("FILE");
    sub->add_flag("--backward", a.backward,
                  "Time the backward pass (a version 2 kernel's <symbol>_backward; default kernel optimized_v2) on "
                  "the shapes but the decode ones: its own forward writes out and lse, both passes are checked");
    sub->add_flag("--allow-unjudged", a.allow_unjudged,
                  "With a baseline and fewer than 5 --reps (too few for the sign test to judge): exit 0 with the "
                  "verdict NOT JUDGED instead of failing (for timings alone)");
}

}  // namespace

void reexec_for_bench(int argc, char** argv) {
    if (argc < 2 || std::strcmp(argv[1], "bench") != 0) return;
    perf::reexec_with_short_spin(argv, "attncheck bench");
}

Command add_bench_command(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    CLI::App* sub = app.add_subcommand(
        "bench", "Time an attention kernel on standard shapes, as fractions of this machine's measured peaks");
    sub->footer(
        "Each kernel is first checked against the float64 reference on every shape (a wrong kernel is not timed), "
        "then timed: --reps repetitions of at least --min-time seconds each; with a baseline, the two kernels' "
        "repetitions alternate (AB, BA, ...) in this one process.\n\n"
        "A kernel of ABI version 2 (attncheck/kernel_abi_v2.h) gets the same shapes as dense [B, H, T, D] tensors, "
        "one kv head per query head, in the first dtype its declaration allows of f32, bf16, f16 (the inputs "
        "rounded to it); a shape outside its declaration is refused. A version 1 and a version 2 kernel can be "
        "compared.\n\n"
        "--backward times a version 2 kernel's backward pass instead (dq, dk, dv for dout uniform in [-1, 1)), "
        "after checking its forward and then its backward against the float64 references; useful flops are "
        "10*D per visible (query, key) pair and head (five products), 2.5 times the forward's.\n\n"
        "Exit: 0 done (and passed), 1 a kernel disagreed with the reference or refused a shape, or the verdict "
        "failed (a shape slower than the baseline by more than --max-slowdown with sign-test p < 0.05, or below "
        "--min-frac-peak) or could not be reached (NOT JUDGED: a baseline with fewer than 5 --reps, unless "
        "--allow-unjudged), 2 bad usage.\n\n"
        "Environment: unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, the command runs with GOMP_SPINCOUNT=10000.");
    sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    add_kernel_options(sub, *a);
    add_run_options(sub, *a);
    return {sub, [a] { return run(*a); }};
}

}  // namespace attncheck::cli
