// cli/bench_report.cpp — `attncheck bench`'s console table and its JSON file, shaped like Google
// Benchmark's (a "context" object and a "benchmarks" list of repetitions and aggregates) so that
// tools/perf_gate.py judges it like the benchmark binary's output.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

#include "attncheck/error.hpp"
#include "attncheck/isa.hpp"
#include "cli/bench_run.hpp"

namespace attncheck::cli::bench {
namespace {

using Json = nlohmann::ordered_json;

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v ? v : fallback;
}

double cv_of(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    return mean > 0 ? std::sqrt(ss / double(v.size() - 1)) / mean : 0;
}

void print_header(const Options& o, const Result& r) {
    std::printf("attncheck bench: %skernel %s", o.backward ? "the backward pass of " : "", describe(o.candidate).c_str());
    if (o.baseline) std::printf(" against baseline %s (interleaved)", describe(*o.baseline).c_str());
    std::printf(", threads %d, %d repetitions of at least %g s per shape\n", o.threads, o.reps, o.min_time);
    std::printf("%s\n", isa_line().c_str());
    char dram[64] = "DRAM read not measured (no decode shape)";
    if (r.calibration.dram_read_gbs > 0)
        std::snprintf(dram, sizeof dram, "DRAM read %.1f GB/s", r.calibration.dram_read_gbs);
    std::printf("calibration (this process): FMA peak %.1f GFLOP/s on %d threads, %s; "
                "OpenMP wait: OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s\n",
                r.calibration.fma_peak_gflops, o.threads, dram,
                env_or("OMP_WAIT_POLICY", "(default)").c_str(), env_or("GOMP_SPINCOUNT", "(default)").c_str());
    for (const ShapeResult& s : r.shapes) {
        if (!s.shape.decode) continue;
        std::printf("%s bound (between its timed repetitions): reading its %d K/V copies again and again on %d "
                    "threads, %.1f MB at %.1f GB/s", s.shape.name.c_str(), s.shape.copies, o.threads, s.kv_bytes * s.shape.copies * 1e-6,
                    s.read_gbs);
        if (o.baseline && s.baseline_kv_bytes != s.kv_bytes)
            std::printf(" (the baseline's %.1f MB at %.1f GB/s)", s.baseline_kv_bytes * s.shape.copies * 1e-6,
                        s.baseline_read_gbs);
        std::printf("\n");
    }
    for (const ShapeResult& s : r.shapes) {
        if (o.backward) {
            std::printf("checked: %s's forward and backward agree with the float64 references on %s (%s; worst %.3g "
                        "of the bound for out, %.3g for dq, dk, dv)",
                        o.candidate.label.c_str(), s.shape.name.c_str(), s.checked.c_str(), s.forward_worst_ratio,
                        s.worst_ratio);
            if (o.baseline)
                std::printf("; baseline too (worst %.3g, %.3g)", s.baseline_forward_worst_ratio, s.baseline_worst_ratio);
        } else {
            std::printf("checked: %s agrees with the float64 reference on %s (%s, worst %.3g of the bound)",
                        o.candidate.label.c_str(), s.shape.name.c_str(), s.checked.c_str(), s.worst_ratio);
            if (o.baseline) std::printf("; baseline too (worst %.3g)", s.baseline_worst_ratio);
        }
        std::printf("\n");
    }
    if (o.backward)
        std::printf("GFLOP/s of the backward: 10*D flops per visible (query, key) pair and head (S, dP, dV, dK, dQ), "
                    "%.1f times the forward's\n", kBackwardFlopsPerForward);
}

void print_table(const char* title, const Result& r, bool baseline) {
    std::printf("\n%s\n%-14s %7s %11s %10s %6s %9s %8s %8s %8s %8s\n", title, "shape", "calls", "median ms",
                "min ms", "cv", "GFLOP/s", "of FMA", "GB/s", "of DRAM", "of read");
    for (const ShapeResult& s : r.shapes) {
        const Timing& t = baseline ? s.baseline : s.candidate;
        const double med = median(t.secs), lo = *std::min_element(t.secs.begin(), t.secs.end());
        std::printf("%-14s %7ld %11.4f %10.4f %5.1f%% %9.1f %8.3f", s.shape.name.c_str(), t.calls, med * 1e3,
                    lo * 1e3, 100 * cv_of(t.secs), gflops(s, med), gflops(s, med) / fma_peak_of(s, r.calibration));
        if (s.shape.decode)
            std::printf(" %8.2f %8.3f %8.3f\n", gbs(s, med, baseline), gbs(s, med, baseline) / r.calibration.dram_read_gbs,
                        frac_read(s, med, baseline));
        else
            std::printf(" %8s %8s %8s\n", "-", "-", "-");
    }
}

void print_comparison(const Options& o, const Result& r) {
    std::printf("\nA/B: candidate time / baseline time per interleaved pair; slower = median ratio > %.2f and "
                "one-sided sign test p < %.2g\n%-14s %12s %12s %8s %10s %9s  %s\n",
                1 + o.max_slowdown, kAlpha, "shape", "cand. ms", "base ms", "ratio", "pairs>lim", "p", "verdict");
    for (const ShapeResult& s : r.shapes) {
        const Comparison& c = *s.comparison;
        std::printf("%-14s %12.4f %12.4f %8.3f %6d/%-3zu %9.3g  %s\n", s.shape.name.c_str(),
                    median(s.candidate.secs) * 1e3, median(s.baseline.secs) * 1e3, c.median_ratio, c.pairs_over,
                    c.ratios.size(), c.p_value, c.slower ? "SLOWER" : "ok");
    }
    if (comparison_unjudged(o))
        std::printf("note: with %d repetitions the sign test cannot reach p < %.2g (%d or more are needed): "
                    "no shape can be judged slower, and the verdict is NOT JUDGED\n", o.reps, kAlpha, kMinJudgedReps);
}

std::string iso_date() {
    const std::time_t now = std::time(nullptr);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S+00:00", std::gmtime(&now));
    return buf;
}

Json context(const Options& o, const Result& r) {
    const IsaInfo isa = isa_info();
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    Json c;
    c["date"] = iso_date();
    c["host_name"] = host;
    c["executable"] = "attncheck bench";
    c["num_cpus"] = isa.cpu_count;
    c["library_build_type"] = "release";
    c["attncheck_isa"] = isa.compiled;
    c["attncheck_kernels"] = isa.kernels;
    c["cpu_model"] = isa.cpu_model;
    c["cpu_features"] = isa.cpu_features;
    c["cpu_count"] = std::to_string(isa.cpu_count);
    c["attncheck"] = isa_line(isa);
    c["omp_wait_policy"] = env_or("OMP_WAIT_POLICY", "(default)");
    c["gomp_spincount"] = env_or("GOMP_SPINCOUNT", "(default)");
    c["attncheck_kernel"] = o.candidate.label;
    c["attncheck_baseline"] = o.baseline ? o.baseline->label : "";
    c["attncheck_kernel_description"] = describe(o.candidate);
    c["attncheck_baseline_description"] = o.baseline ? describe(*o.baseline) : "";
    c["attncheck_threads"] = std::to_string(o.threads);
    c["attncheck_pass"] = o.backward ? "backward" : "forward";
    c["fma_peak_gflops"] = r.calibration.fma_peak_gflops;
    if (r.calibration.dram_read_gbs > 0) c["dram_read_gbs"] = r.calibration.dram_read_gbs;  // decode shapes only
    c["attncheck_verdict"] = r.verdict;
    return c;
}

// The counters of one call time on a shape, as kernel_bench.cpp names them.
void counters(Json& e, const ShapeResult& s, const Calibration& cal, double secs, int threads, bool baseline) {
    e["threads"] = threads;
    e["us_per_call"] = secs * 1e6;
    e["gflops"] = gflops(s, secs);
    e["peak_gflops"] = fma_peak_of(s, cal);
    e["frac_peak"] = gflops(s, secs) / fma_peak_of(s, cal);
    if (s.shape.decode) {
        e["gbs"] = gbs(s, secs, baseline);
        e["frac_bw"] = gbs(s, secs, baseline) / cal.dram_read_gbs;
        e["read_gbs"] = baseline ? s.baseline_read_gbs : s.read_gbs;
        e["frac_read"] = frac_read(s, secs, baseline);
    }
}

Json entry(const std::string& name, const std::string& run_type, int reps, long calls, double secs, double cpu) {
    Json e;
    e["name"] = name;
    e["family_index"] = 0;
    e["run_name"] = name;
    e["run_type"] = run_type;
    e["repetitions"] = reps;
    e["threads"] = 1;
    e["iterations"] = calls;
    e["real_time"] = secs * 1e3;
    e["cpu_time"] = cpu * 1e3;
    e["time_unit"] = "ms";
    return e;
}

// One kernel's repetitions on a shape, then the aggregates Google Benchmark writes (mean,
// median, stddev, cv; plus min), each aggregate taken over the repetitions' figures.
void add_runs(Json& list, const std::string& name, const Options& o, const Result& r, const ShapeResult& s,
              const Timing& t, const std::optional<Comparison>& cmp, bool baseline) {
    for (std::size_t i = 0; i < t.secs.size(); ++i) {
        Json e = entry(name, "iteration", o.reps, t.calls, t.secs[i], t.cpu_secs[i]);
        e["repetition_index"] = i;
        counters(e, s, r.calibration, t.secs[i], o.threads, baseline);
        if (cmp) e["speedup"] = 1.0 / cmp->ratios[i];
        list.push_back(e);
    }
    const double mean = std::accumulate(t.secs.begin(), t.secs.end(), 0.0) / double(t.secs.size());
    const double med = median(t.secs), lo = *std::min_element(t.secs.begin(), t.secs.end());
    for (const auto& [agg, secs] : {std::pair<const char*, double>{"mean", mean}, {"median", med}, {"min", lo}}) {
        Json e = entry(name + "_" + agg, "aggregate", o.reps, t.calls, secs, median(t.cpu_secs));
        e["run_name"] = name;
        e["aggregate_name"] = agg;
        e["aggregate_unit"] = "time";
        counters(e, s, r.calibration, secs, o.threads, baseline);
        if (cmp && std::string(agg) == "median") e["speedup"] = 1.0 / cmp->median_ratio;
        list.push_back(e);
    }
    Json cv = entry(name + "_cv", "aggregate", o.reps, t.calls, cv_of(t.secs), cv_of(t.cpu_secs));
    cv["run_name"] = name;
    cv["aggregate_name"] = "cv";
    cv["aggregate_unit"] = "percentage";
    list.push_back(cv);
}

Json comparison_json(const Options& o, const ShapeResult& s) {
    const Comparison& c = *s.comparison;
    Json j;
    j["shape"] = s.shape.name;
    j["ratios"] = c.ratios;
    j["median_ratio"] = c.median_ratio;
    j["max_slowdown"] = o.max_slowdown;
    j["pairs_over_limit"] = c.pairs_over;
    j["sign_test_p"] = c.p_value;
    j["slower"] = c.slower;
    return j;
}

}  // namespace

void print_report(const Options& o, const Result& r) {
    print_header(o, r);
    print_table(("candidate " + o.candidate.label + ":").c_str(), r, false);
    if (o.baseline) {
        print_table(("baseline " + o.baseline->label + ":").c_str(), r, true);
        print_comparison(o, r);
    }
    std::printf("\n\"of FMA\" divides by the FMA peak of each shape's timed windows, GFLOP/s:");
    for (const ShapeResult& s : r.shapes) std::printf(" %s %.1f", s.shape.name.c_str(), fma_peak_of(s, r.calibration));
    std::printf("\n");
    if (o.min_frac_peak)
        for (const ShapeResult& s : r.shapes)
            std::printf("%s: %.3f of its bound (%s), --min-frac-peak %.3f: %s\n", s.shape.name.c_str(),
                        frac_bound(s, r.calibration, median(s.candidate.secs)),
                        s.shape.decode ? "reading its K/V copies" : "FMA peak", *o.min_frac_peak,
                        s.below_min_frac ? "BELOW" : "ok");
    std::printf("\nverdict: %s\n", r.verdict.c_str());
    std::fflush(stdout);
}

void write_json(const Options& o, const Result& r, const std::string& path) {
    Json doc;
    doc["context"] = context(o, r);
    Json list = Json::array();
    const std::string threads = "/threads:" + std::to_string(o.threads);
    // The backward's names differ, so that a gate never compares one pass with the other.
    const std::string family = o.backward ? "attncheck_bench_backward" : "attncheck_bench";
    for (const ShapeResult& s : r.shapes) {
        add_runs(list, family + "/" + s.shape.name + threads, o, r, s, s.candidate, s.comparison, false);
        if (o.baseline)
            add_runs(list, family + "_baseline/" + s.shape.name + threads, o, r, s, s.baseline, std::nullopt, true);
    }
    doc["benchmarks"] = list;
    Json cmp = Json::array();
    for (const ShapeResult& s : r.shapes)
        if (s.comparison) cmp.push_back(comparison_json(o, s));
    doc["attncheck_comparison"] = cmp;
    doc["attncheck_verdict"] = {{"failed", r.failed}, {"line", r.verdict}};
    std::ofstream out(path);
    out << doc.dump(2) << "\n";
    out.close();
    if (!out) throw InputError("--json " + path + ": cannot write the file");
}

}  // namespace attncheck::cli::bench
