// cli/bench_run.cpp — `attncheck bench`'s measurements: the correctness check of every kernel on
// every shape (before anything is timed), the calibration, the interleaved repetitions, and the
// paired sign test of candidate against baseline.
#include "cli/bench_run.hpp"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "attncheck/tolerance.hpp"
#include "perf/calibration.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The float64 oracle with its error bound costs far more than the kernel: about a second per head
// of prefill-2048 on a 2020s Xeon core (9 s for all 8), so problems with more (query, key) pairs
// per head than this are checked on their first and last heads only, of the same call's output.
// Every head of the other standard shapes is checked (prefill-512: 0.07 s a head).
constexpr double kFullCheckPairs = 1 << 20;

// The oracle of some heads of a problem (B = 1: head h is a contiguous block of q, k, v, out).
struct Oracle {
    std::vector<int> heads;
    std::vector<reference::BoundedOutput> per_head;
};

attncheck_problem one_head(const attncheck_problem& p) {
    attncheck_problem h = p;
    h.heads = 1;
    return h;
}

Oracle make_oracle(const perf::KernelProblem& pr) {
    const attncheck_problem& p = pr.p;
    Oracle o;
    if (double(p.q_len) * double(p.kv_len) <= kFullCheckPairs) {
        for (int h = 0; h < p.heads; ++h) o.heads.push_back(h);
    } else {
        o.heads = {0, p.heads - 1};
    }
    const std::size_t qs = std::size_t(p.q_len) * std::size_t(p.head_dim);
    const std::size_t ks = std::size_t(p.kv_len) * std::size_t(p.head_dim);
    const std::size_t vs = std::size_t(p.kv_len) * std::size_t(p.value_dim);
    for (int h : o.heads)
        o.per_head.push_back(reference::attention_bounded(one_head(p), pr.q.data() + std::size_t(h) * qs,
                                                          pr.k_copy(0) + std::size_t(h) * ks,
                                                          pr.v_copy(0) + std::size_t(h) * vs));
    return o;
}

std::string describe_heads(const Oracle& o, int heads) {
    if (int(o.heads.size()) == heads) return "all " + std::to_string(heads) + " heads";
    std::ostringstream s;
    s << "heads " << o.heads.front() << " and " << o.heads.back() << " of " << heads;
    return s.str();
}

int call(const Kernel& k, perf::KernelProblem& pr, int copy) {
    return k.fn(&pr.p, pr.q.data(), pr.k_copy(copy), pr.v_copy(copy), pr.out.data());
}

Refusal refused(const Kernel& k, const perf::KernelShape& s, int rc) {
    return {"kernel " + k.label + " returned " + std::to_string(rc) + " (not ATTNCHECK_OK) on shape " + s.name +
            " (B=1 H=" + std::to_string(perf::kShapeHeads) + " Tq=" + std::to_string(s.q_len) +
            " Tk=" + std::to_string(s.kv_len) + " Dk=Dv=" + std::to_string(perf::kShapeHeadDim) +
            " q_offset=" + std::to_string(s.q_offset) + " causal); nothing was timed"};
}

// One call on copy 0 compared with the oracle; returns the worst test ratio, or throws Refusal.
double check(const Kernel& k, perf::KernelProblem& pr, const perf::KernelShape& s, const Oracle& o) {
    std::fill(pr.out.begin(), pr.out.end(), std::numeric_limits<float>::quiet_NaN());
    const int rc = call(k, pr, 0);
    if (rc != ATTNCHECK_OK) throw refused(k, s, rc);
    const std::size_t os = std::size_t(pr.p.q_len) * std::size_t(pr.p.value_dim);
    double worst = 0;
    for (std::size_t i = 0; i < o.heads.size(); ++i) {
        const int h = o.heads[i];
        const Agreement a = check_against_bound(pr.out.data() + std::size_t(h) * os, o.per_head[i].value.data(),
                                                o.per_head[i].bound.data(), os);
        if (!a.ok) {
            const std::size_t row = a.worst_index / std::size_t(pr.p.value_dim);
            const std::size_t col = a.worst_index % std::size_t(pr.p.value_dim);
            throw Refusal{"kernel " + k.label + " disagrees with the float64 reference on shape " + s.name +
                          " at out[0," + std::to_string(h) + "," + std::to_string(row) + "," + std::to_string(col) +
                          "] [b,h,i,c]: " + a.describe() + "; a wrong kernel is not timed"};
        }
        worst = std::max(worst, a.worst_ratio);
    }
    return worst;
}

double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// `calls` calls, K/V copies in turn from `copy`; appends seconds per call to t.
void repetition(const Kernel& k, perf::KernelProblem& pr, const perf::KernelShape& s, long calls, int& copy,
                Timing& t) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) {
        const int rc = call(k, pr, copy);
        copy = (copy + 1) % pr.copies;
        if (rc != ATTNCHECK_OK) throw refused(k, s, rc);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    t.secs.push_back(secs / double(calls));
    t.cpu_secs.push_back((process_cpu_seconds() - c0) / double(calls));
}

// Calls per repetition: doubled from 1 until a batch lasts an eighth of min_time, then scaled
// to min_time; every repetition of the kernel on the shape then makes that many calls.
long calls_for(const Kernel& k, perf::KernelProblem& pr, const perf::KernelShape& s, double min_time, int& copy) {
    long n = 1;
    for (;;) {
        Timing probe;
        repetition(k, pr, s, n, copy, probe);
        const double per_call = probe.secs.back();
        if (per_call * double(n) >= min_time / 8 || n >= (1L << 24))
            return std::max(1L, long(std::ceil(min_time / std::max(per_call, 1e-9))));
        n *= 2;
    }
}

// P(X >= k) for X ~ Binomial(n, 1/2).
double binomial_tail(int n, int k) {
    double p = 0;
    for (int j = k; j <= n; ++j) p += std::exp(std::lgamma(n + 1.0) - std::lgamma(j + 1.0) - std::lgamma(n - j + 1.0));
    return std::min(1.0, p * std::pow(0.5, n));
}

Comparison compare(const Timing& cand, const Timing& base, double max_slowdown) {
    Comparison c;
    for (std::size_t i = 0; i < cand.secs.size(); ++i) c.ratios.push_back(cand.secs[i] / base.secs[i]);
    c.median_ratio = median(c.ratios);
    for (double r : c.ratios) c.pairs_over += r > 1 + max_slowdown;
    c.p_value = binomial_tail(int(c.ratios.size()), c.pairs_over);
    c.slower = c.median_ratio > 1 + max_slowdown && c.p_value < kAlpha;
    return c;
}

// Times one shape: repetitions of the candidate and of the baseline, interleaved (AB, BA, AB,
// ...: each kernel runs first in half of the pairs, so neither always inherits the other's cache).
void time_shape(const Options& o, perf::KernelProblem& pr, ShapeResult& r) {
    int copy = 0;
    r.candidate.calls = calls_for(o.candidate, pr, r.shape, o.min_time, copy);
    if (o.baseline) r.baseline.calls = calls_for(*o.baseline, pr, r.shape, o.min_time, copy);
    for (int rep = 0; rep < o.reps; ++rep) {
        const bool base_first = o.baseline && rep % 2 == 1;
        if (base_first) repetition(*o.baseline, pr, r.shape, r.baseline.calls, copy, r.baseline);
        repetition(o.candidate, pr, r.shape, r.candidate.calls, copy, r.candidate);
        if (o.baseline && !base_first) repetition(*o.baseline, pr, r.shape, r.baseline.calls, copy, r.baseline);
    }
    if (o.baseline) r.comparison = compare(r.candidate, r.baseline, o.max_slowdown);
}

std::string verdict_line(const Options& o, const Result& r) {
    std::vector<std::string> slower, below;
    for (const ShapeResult& s : r.shapes) {
        if (s.comparison && s.comparison->slower) slower.push_back(s.shape.name);
        if (s.below_min_frac) below.push_back(s.shape.name);
    }
    const auto join = [](const std::vector<std::string>& v) {
        std::string out;
        for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
        return out;
    };
    if (!o.baseline && !o.min_frac_peak) return "no verdict (no --baseline-kernel/--baseline-lib, no --min-frac-peak)";
    std::string line = slower.empty() && below.empty() ? "PASS" : "FAIL";
    if (!slower.empty()) line += " — slower than the baseline by more than the allowed slowdown: " + join(slower);
    if (!below.empty()) line += " — below --min-frac-peak: " + join(below);
    return line;
}

}  // namespace

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double frac_bound(const ShapeResult& s, const Calibration& c, double secs) {
    return s.shape.decode ? gbs(s, secs) / c.dram_read_gbs : gflops(s, secs) / c.fma_peak_gflops;
}

Result run(const Options& o) {
    Result r;
    std::vector<perf::KernelProblem> problems;
    for (const perf::KernelShape& s : o.shapes) {
        problems.push_back(perf::make_kernel_problem(s));
        ShapeResult sr;
        sr.shape = s;
        sr.useful_flops = problems.back().useful_flops;
        sr.kv_bytes = problems.back().kv_bytes;
        r.shapes.push_back(sr);
    }
    const int all_threads = omp_get_max_threads();
    omp_set_num_threads(o.threads);
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        const Oracle oracle = make_oracle(problems[i]);
        r.shapes[i].checked = describe_heads(oracle, problems[i].p.heads);
        r.shapes[i].worst_ratio = check(o.candidate, problems[i], o.shapes[i], oracle);
        if (o.baseline) r.shapes[i].baseline_worst_ratio = check(*o.baseline, problems[i], o.shapes[i], oracle);
    }
    // The DRAM bandwidth with every OpenMP thread (the machine's), the FMA peak with the bench's.
    omp_set_num_threads(all_threads);
    r.calibration.dram_read_gbs = perf::dram_read_gbs();
    omp_set_num_threads(o.threads);
    r.calibration.fma_peak_gflops = perf::fma_peak_gflops(o.threads);
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        ShapeResult& s = r.shapes[i];
        time_shape(o, problems[i], s);
        s.below_min_frac = o.min_frac_peak && frac_bound(s, r.calibration, median(s.candidate.secs)) < *o.min_frac_peak;
        r.failed |= s.below_min_frac || (s.comparison && s.comparison->slower);
    }
    r.verdict = verdict_line(o, r);
    return r;
}

}  // namespace attncheck::cli::bench
