// cli/bench_run.cpp — `attncheck bench`'s measurements: the correctness check of every kernel on
// every shape (before anything is timed), the calibration, the interleaved repetitions, and the
// paired sign test of candidate against baseline. What is called and how it is checked is in
// bench_subject.cpp.
#include "cli/bench_run.hpp"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>

#include "attncheck/problem_v2.hpp"
#include "cli/bench_subject.hpp"
#include "perf/calibration.hpp"

namespace attncheck::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// `calls` calls, K/V copies in turn from `copy`; appends seconds per call to t.
void repetition(Subject& sub, const perf::KernelShape& s, long calls, int& copy, Timing& t) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) {
        const int rc = sub.call(copy);
        copy = (copy + 1) % sub.pr->copies;
        if (rc != ATTNCHECK_OK) throw refused(*sub.kernel, s, rc, sub.backward);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    t.secs.push_back(secs / double(calls));
    t.cpu_secs.push_back((process_cpu_seconds() - c0) / double(calls));
}

// Calls per repetition: doubled from 1 until a batch lasts an eighth of min_time, then scaled
// to min_time; every repetition of the kernel on the shape then makes that many calls.
long calls_for(Subject& sub, const perf::KernelShape& s, double min_time, int& copy) {
    long n = 1;
    for (;;) {
        Timing probe;
        repetition(sub, s, n, copy, probe);
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
// A decode shape's read rates are those of its timed windows too (perf::ReadWindows over each
// kernel's K/V copies), as its FMA peak.
void time_shape(const Options& o, Subject& cand, Subject* base, ShapeResult& r) {
    int copy = 0;
    r.candidate.calls = calls_for(cand, r.shape, o.min_time, copy);
    if (base) r.baseline.calls = calls_for(*base, r.shape, o.min_time, copy);
    perf::PeakWindows peak(o.threads);
    std::optional<perf::ReadWindows> read, base_read;
    if (r.shape.decode) {
        read.emplace(r.kv_bytes * double(cand.pr->copies));
        if (base) base_read.emplace(r.baseline_kv_bytes * double(base->pr->copies));
    }
    const auto add = [](perf::RateWindows& w, double secs) {
        w.add(secs);
        if (w.due()) w.measure();
    };
    // One repetition, its seconds added to the FMA windows and to the kernel's read windows.
    const auto timed_rep = [&](Subject& sub, Timing& t, std::optional<perf::ReadWindows>& rw) {
        repetition(sub, r.shape, t.calls, copy, t);
        const double secs = t.secs.back() * double(t.calls);
        add(peak, secs);
        if (rw) add(*rw, secs);
    };
    for (int rep = 0; rep < o.reps; ++rep) {
        const bool base_first = base && rep % 2 == 1;
        if (base_first) timed_rep(*base, r.baseline, base_read);
        timed_rep(cand, r.candidate, read);
        if (base && !base_first) timed_rep(*base, r.baseline, base_read);
    }
    peak.finish();
    r.fma_peak_gflops = peak.peak_gflops();
    if (read) {
        read->finish();
        r.read_gbs = read->read_gbs();
    }
    if (base_read) {
        base_read->finish();
        r.baseline_read_gbs = base_read->read_gbs();
    }
    if (base) r.comparison = compare(r.candidate, r.baseline, o.max_slowdown);
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
    // A comparison that cannot reach its significance is never a PASS: however much slower the
    // candidate, fewer than kMinJudgedReps pairs would have let it through.
    const bool unjudged = comparison_unjudged(o);
    std::string line = !below.empty() || !slower.empty() ? "FAIL" : unjudged ? "NOT JUDGED" : "PASS";
    if (!slower.empty()) line += " — slower than the baseline by more than the allowed slowdown: " + join(slower);
    if (!below.empty()) line += " — below --min-frac-peak: " + join(below);
    if (unjudged) {
        std::ostringstream why;
        why << " — the comparison with the baseline: " << o.reps << " repetitions cannot reach sign-test p < " << kAlpha
            << " (--reps " << kMinJudgedReps << " or more)" << (o.allow_unjudged ? "; exit 0 as --allow-unjudged asks" : "");
        line += why.str();
    }
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
    return s.shape.decode ? frac_read(s, secs) : gflops(s, secs) / fma_peak_of(s, c);
}

std::string describe(const Kernel& k) {
    if (!k.fn_v2) return k.label;
    return k.label + " (ABI version 2, " + dtype_name(k.dtype) + ")";
}

std::int32_t bench_dtype(const KernelDeclaration& d) {
    for (std::int32_t t : {ATTNCHECK_DTYPE_F32, ATTNCHECK_DTYPE_BF16, ATTNCHECK_DTYPE_F16})
        if (d.allows_dtype(t)) return t;
    return ATTNCHECK_DTYPE_F32;  // not reached: a parsed declaration allows some dtype
}

Result run(const Options& o) {
    Result r;
    std::vector<perf::KernelProblem> problems;
    for (const perf::KernelShape& s : o.shapes) {
        problems.push_back(perf::make_kernel_problem(s));
        ShapeResult sr;
        sr.shape = s;
        sr.useful_flops = problems.back().useful_flops * (o.backward ? kBackwardFlopsPerForward : 1.0);
        r.shapes.push_back(sr);
    }
    // After the last push_back: a Subject points into its problem.
    std::vector<Subject> candidates, baselines;
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        candidates.emplace_back(o.candidate, problems[i], o.backward);
        r.shapes[i].kv_bytes = candidates.back().kv_bytes();
        if (o.baseline) {
            baselines.emplace_back(*o.baseline, problems[i], o.backward);
            r.shapes[i].baseline_kv_bytes = baselines.back().kv_bytes();
        }
    }
    const int all_threads = omp_get_max_threads();
    omp_set_num_threads(o.threads);
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        ShapeResult& sr = r.shapes[i];
        const std::vector<int> heads = checked_heads(problems[i].p);
        sr.checked = describe_heads(heads, problems[i].p.heads);
        check_declared(candidates[i], o.shapes[i]);
        const std::vector<HeadOracle> oracles = oracles_of(candidates[i], heads);
        sr.forward_worst_ratio = check(candidates[i], o.shapes[i], heads, oracles);
        if (o.baseline) {
            check_declared(baselines[i], o.shapes[i]);
            sr.baseline_forward_worst_ratio =
                same_oracle(candidates[i], baselines[i])
                    ? check(baselines[i], o.shapes[i], heads, oracles)
                    : check(baselines[i], o.shapes[i], heads, oracles_of(baselines[i], heads));
        }
        sr.worst_ratio = sr.forward_worst_ratio;
        sr.baseline_worst_ratio = sr.baseline_forward_worst_ratio;
        if (o.backward) {
            sr.worst_ratio = check_backward(candidates[i], o.shapes[i], heads);
            if (o.baseline) sr.baseline_worst_ratio = check_backward(baselines[i], o.shapes[i], heads);
        }
    }
    // The DRAM bandwidth with every OpenMP thread (the machine's), the FMA peak with the bench's.
    // Only decode shapes divide by the DRAM rate, and its probe streams a buffer of 4 times the
    // last-level cache (2 GiB where the cache reports 512 MiB): without one it is not measured.
    omp_set_num_threads(all_threads);
    const bool any_decode = std::any_of(o.shapes.begin(), o.shapes.end(), [](const perf::KernelShape& s) { return s.decode; });
    if (any_decode) r.calibration.dram_read_gbs = perf::dram_read_gbs();
    omp_set_num_threads(o.threads);
    r.calibration.fma_peak_gflops = perf::fma_peak_gflops(o.threads);
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        ShapeResult& s = r.shapes[i];
        time_shape(o, candidates[i], o.baseline ? &baselines[i] : nullptr, s);
        s.below_min_frac = o.min_frac_peak && frac_bound(s, r.calibration, median(s.candidate.secs)) < *o.min_frac_peak;
        r.failed |= s.below_min_frac || (s.comparison && s.comparison->slower);
    }
    r.failed |= comparison_unjudged(o) && !o.allow_unjudged;
    r.verdict = verdict_line(o, r);
    return r;
}

}  // namespace attncheck::cli::bench
