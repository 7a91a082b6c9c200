// cli/bench_run.cpp — `attncheck bench`'s measurements: the correctness check of every kernel on
// every shape (before anything is timed), the calibration, the interleaved repetitions, and the
// paired sign test of candidate against baseline. Version 1 kernels are called on the shape's
// float32 problem; version 2 kernels on a view of the same values (ProblemV2).
#include "cli/bench_run.hpp"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>

#include "attncheck/problem_v2.hpp"
#include "attncheck/tolerance.hpp"
#include "perf/calibration.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The float64 oracle with its error bound costs far more than the kernel: about a second per head
// of prefill-2048 on a 2020s Xeon core (9 s for all 8), so problems with more (query, key) pairs
// per head than this are checked on their first and last heads only, of the same call's output.
// Every head of the other standard shapes is checked (prefill-512: 0.07 s a head).
constexpr double kFullCheckPairs = 1 << 20;

// The heads of a problem the oracle checks: all of them, or the first and the last.
std::vector<int> checked_heads(const attncheck_problem& p) {
    std::vector<int> heads;
    if (double(p.q_len) * double(p.kv_len) <= kFullCheckPairs) {
        for (int h = 0; h < p.heads; ++h) heads.push_back(h);
    } else {
        heads = {0, p.heads - 1};
    }
    return heads;
}

std::string describe_heads(const std::vector<int>& checked, int heads) {
    if (int(checked.size()) == heads) return "all " + std::to_string(heads) + " heads";
    std::ostringstream s;
    s << "heads " << checked.front() << " and " << checked.back() << " of " << heads;
    return s.str();
}

attncheck_problem one_head(const attncheck_problem& p) {
    attncheck_problem h = p;
    h.heads = 1;
    return h;
}

// A version 2 kernel's problem on a shape: the version 1 problem's values rounded to the kernel's
// dtype (f32: the same buffers), [B, H, T, D] dense, one kv head per query head, q_pos = the
// shape's q_offset (every standard shape is bottom-right aligned: q_offset + Tq = Tk).
struct ProblemV2 {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    std::vector<std::uint16_t> q16, k16, v16, out16;  // f16 / bf16 storage
    std::int32_t q_pos = 0;
    attncheck_problem_v2 p{};  // on_copy() sets the data pointers and q_pos

    ProblemV2(const perf::KernelProblem& pr, std::int32_t dt) : dtype(dt) {
        const attncheck_problem& v1 = pr.p;
        const auto to_dtype = [&](const std::vector<float>& src, std::vector<std::uint16_t>& dst) {
            dst.resize(src.size());
            for (std::size_t i = 0; i < src.size(); ++i) store_element(dtype, dst.data(), std::int64_t(i), src[i]);
        };
        if (dtype != ATTNCHECK_DTYPE_F32) {
            to_dtype(pr.q, q16);
            to_dtype(pr.k, k16);
            to_dtype(pr.v, v16);
            out16.assign(pr.out.size(), 0);
        }
        q_pos = v1.q_offset;
        p.abi_version = ATTNCHECK_ABI_VERSION_2;
        p.struct_size = sizeof(attncheck_problem_v2);
        p.dtype = dtype;
        p.batch = v1.batch;
        p.q_heads = p.kv_heads = v1.heads;
        p.head_dim = v1.head_dim;
        p.value_dim = v1.value_dim;
        p.q_len = v1.q_len;
        p.kv_len = v1.kv_len;
        p.causal = v1.causal;
        p.window_left = p.window_right = -1;
        p.scale = v1.scale;
        const auto bhtd = [&](attncheck_tensor_v2& t, int rows, int width) {
            t.stride[3] = 1;
            t.stride[2] = width;
            t.stride[1] = std::int64_t(rows) * width;
            t.stride[0] = std::int64_t(v1.heads) * t.stride[1];
        };
        bhtd(p.q, v1.q_len, v1.head_dim);
        bhtd(p.k, v1.kv_len, v1.head_dim);
        bhtd(p.v, v1.kv_len, v1.value_dim);
        bhtd(p.out, v1.q_len, v1.value_dim);
    }

    // The problem on K/V copy `copy` (pr holds the float32 storage and the copy count).
    const attncheck_problem_v2& on_copy(perf::KernelProblem& pr, int copy) {
        p.q_pos = &q_pos;
        const std::size_t kc = pr.k.size() / std::size_t(pr.copies) * std::size_t(copy);
        const std::size_t vc = pr.v.size() / std::size_t(pr.copies) * std::size_t(copy);
        if (dtype == ATTNCHECK_DTYPE_F32) {
            p.q.data = pr.q.data();
            p.k.data = pr.k.data() + kc;
            p.v.data = pr.v.data() + vc;
            p.out.data = pr.out.data();
        } else {
            p.q.data = q16.data();
            p.k.data = k16.data() + kc;
            p.v.data = v16.data() + vc;
            p.out.data = out16.data();
        }
        return p;
    }
    // Element i of out ([B, H, Tq, Dv], its storage order) as a float.
    float out_at(const perf::KernelProblem& pr, std::size_t i) const {
        return dtype == ATTNCHECK_DTYPE_F32 ? pr.out[i] : load_element(dtype, out16.data(), std::int64_t(i));
    }
    // NaN in every output element, so that an element the kernel leaves unwritten fails the check.
    void poison_out(perf::KernelProblem& pr) {
        std::fill(pr.out.begin(), pr.out.end(), std::numeric_limits<float>::quiet_NaN());
        for (std::size_t i = 0; i < out16.size(); ++i)
            store_element(dtype, out16.data(), std::int64_t(i), std::numeric_limits<float>::quiet_NaN());
    }
};

// The float64 oracle of one head of a problem and the bound any correct evaluation meets: [Tq, Dv].
struct HeadOracle {
    std::vector<double> value, bound;
};

HeadOracle oracle_v1(const perf::KernelProblem& pr, int h) {
    const attncheck_problem& p = pr.p;
    const std::size_t qs = std::size_t(p.q_len) * std::size_t(p.head_dim);
    const std::size_t ks = std::size_t(p.kv_len) * std::size_t(p.head_dim);
    const std::size_t vs = std::size_t(p.kv_len) * std::size_t(p.value_dim);
    const reference::BoundedOutput o = reference::attention_bounded(
        one_head(p), pr.q.data() + std::size_t(h) * qs, pr.k_copy(0) + std::size_t(h) * ks,
        pr.v_copy(0) + std::size_t(h) * vs);
    return {std::vector<double>(o.value.begin(), o.value.end()), std::vector<double>(o.bound.begin(), o.bound.end())};
}

// Head h of the version 2 problem (K/V copy 0) as a one-head problem, through the version 2
// oracle: it reads the inputs as stored in the kernel's dtype, and its bound is that dtype's.
HeadOracle oracle_v2(ProblemV2& v2, perf::KernelProblem& pr, int h, const KernelDeclaration& d) {
    attncheck_problem_v2 one = v2.on_copy(pr, 0);
    const std::size_t bytes = dtype_size(v2.dtype);
    for (attncheck_tensor_v2* t : {&one.q, &one.k, &one.v, &one.out})
        t->data = static_cast<char*>(t->data) + std::size_t(h) * std::size_t(t->stride[1]) * bytes;
    one.q_heads = one.kv_heads = 1;
    reference::OracleV2Options options;
    options.probabilities_rounded = d.rounds_probabilities;
    options.tanh_ulps = d.tanh_ulps;
    reference::OracleV2 o = reference::attention_v2_oracle(one, options);
    return {std::move(o.out), std::move(o.out_bound)};
}

// One kernel on one shape: what it is called with (the version 1 problem, or its version 2 view).
struct Subject {
    const Kernel* kernel;
    perf::KernelProblem* pr;
    std::optional<ProblemV2> v2;
    Subject(const Kernel& k, perf::KernelProblem& problem) : kernel(&k), pr(&problem) {
        if (k.fn_v2) v2.emplace(problem, k.dtype);
    }
    int call(int copy) {
        if (v2) return kernel->fn_v2(&v2->on_copy(*pr, copy));
        return kernel->fn(&pr->p, pr->q.data(), pr->k_copy(copy), pr->v_copy(copy), pr->out.data());
    }
    // The K/V bytes a call must read, in the kernel's dtype.
    double kv_bytes() const { return v2 ? pr->kv_bytes * double(dtype_size(v2->dtype)) / 4.0 : pr->kv_bytes; }
};

std::string shape_line(const perf::KernelShape& s) {
    return s.name + " (B=1 H=" + std::to_string(perf::kShapeHeads) + " Tq=" + std::to_string(s.q_len) +
           " Tk=" + std::to_string(s.kv_len) + " Dk=Dv=" + std::to_string(perf::kShapeHeadDim) +
           " q_offset=" + std::to_string(s.q_offset) + " causal)";
}

Refusal refused(const Kernel& k, const perf::KernelShape& s, int rc) {
    return {"kernel " + k.label + " returned " + std::to_string(rc) + " (not ATTNCHECK_OK) on shape " + shape_line(s) +
            "; nothing was timed"};
}

// A version 2 kernel whose declaration rules the shape out is refused before any call.
void check_declared(Subject& sub, const perf::KernelShape& s) {
    if (!sub.v2) return;
    const std::string why = sub.kernel->declaration.unsupported_reason(sub.v2->on_copy(*sub.pr, 0));
    if (!why.empty())
        throw Refusal{"kernel " + sub.kernel->label + ": shape " + shape_line(s) + " in " +
                      dtype_name(sub.v2->dtype) + " is outside its declaration: " + why +
                      " (--shapes picks the shapes); nothing was timed"};
}

// The oracle of each checked head for what the subject reads.
std::vector<HeadOracle> oracles_of(Subject& sub, const std::vector<int>& heads) {
    std::vector<HeadOracle> out;
    for (int h : heads)
        out.push_back(sub.v2 ? oracle_v2(*sub.v2, *sub.pr, h, sub.kernel->declaration) : oracle_v1(*sub.pr, h));
    return out;
}

// Whether two subjects read the same inputs with the same bound (then one oracle serves both).
bool same_oracle(const Subject& a, const Subject& b) {
    if (bool(a.v2) != bool(b.v2)) return false;
    return !a.v2 || (a.v2->dtype == b.v2->dtype &&
                     a.kernel->declaration.rounds_probabilities == b.kernel->declaration.rounds_probabilities &&
                     a.kernel->declaration.tanh_ulps == b.kernel->declaration.tanh_ulps);
}

// One call on copy 0 compared with the oracle of each checked head (oracles[i] of heads[i]);
// returns the worst test ratio, or throws Refusal.
double check(Subject& sub, const perf::KernelShape& s, const std::vector<int>& heads,
             const std::vector<HeadOracle>& oracles) {
    perf::KernelProblem& pr = *sub.pr;
    if (sub.v2) {
        sub.v2->poison_out(pr);
    } else {
        std::fill(pr.out.begin(), pr.out.end(), std::numeric_limits<float>::quiet_NaN());
    }
    const int rc = sub.call(0);
    if (rc != ATTNCHECK_OK) throw refused(*sub.kernel, s, rc);
    const std::size_t os = std::size_t(pr.p.q_len) * std::size_t(pr.p.value_dim);
    std::vector<float> got(os);
    double worst = 0;
    for (std::size_t k = 0; k < heads.size(); ++k) {
        const int h = heads[k];
        const HeadOracle& o = oracles[k];
        for (std::size_t i = 0; i < os; ++i)
            got[i] = sub.v2 ? sub.v2->out_at(pr, std::size_t(h) * os + i) : pr.out[std::size_t(h) * os + i];
        const Agreement a = check_against_bound(got.data(), o.value.data(), o.bound.data(), os);
        if (!a.ok) {
            const std::size_t row = a.worst_index / std::size_t(pr.p.value_dim);
            const std::size_t col = a.worst_index % std::size_t(pr.p.value_dim);
            throw Refusal{"kernel " + sub.kernel->label + " disagrees with the float64 reference on shape " + s.name +
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
void repetition(Subject& sub, const perf::KernelShape& s, long calls, int& copy, Timing& t) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) {
        const int rc = sub.call(copy);
        copy = (copy + 1) % sub.pr->copies;
        if (rc != ATTNCHECK_OK) throw refused(*sub.kernel, s, rc);
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
        sr.useful_flops = problems.back().useful_flops;
        r.shapes.push_back(sr);
    }
    // After the last push_back: a Subject points into its problem.
    std::vector<Subject> candidates, baselines;
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        candidates.emplace_back(o.candidate, problems[i]);
        r.shapes[i].kv_bytes = candidates.back().kv_bytes();
        if (o.baseline) {
            baselines.emplace_back(*o.baseline, problems[i]);
            r.shapes[i].baseline_kv_bytes = baselines.back().kv_bytes();
        }
    }
    const int all_threads = omp_get_max_threads();
    omp_set_num_threads(o.threads);
    for (std::size_t i = 0; i < o.shapes.size(); ++i) {
        const std::vector<int> heads = checked_heads(problems[i].p);
        r.shapes[i].checked = describe_heads(heads, problems[i].p.heads);
        check_declared(candidates[i], o.shapes[i]);
        const std::vector<HeadOracle> oracles = oracles_of(candidates[i], heads);
        r.shapes[i].worst_ratio = check(candidates[i], o.shapes[i], heads, oracles);
        if (o.baseline) {
            check_declared(baselines[i], o.shapes[i]);
            r.shapes[i].baseline_worst_ratio =
                same_oracle(candidates[i], baselines[i])
                    ? check(baselines[i], o.shapes[i], heads, oracles)
                    : check(baselines[i], o.shapes[i], heads, oracles_of(baselines[i], heads));
        }
    }
    // The DRAM bandwidth with every OpenMP thread (the machine's), the FMA peak with the bench's.
    omp_set_num_threads(all_threads);
    r.calibration.dram_read_gbs = perf::dram_read_gbs();
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
