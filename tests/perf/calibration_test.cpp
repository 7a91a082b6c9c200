// tests/perf/calibration_test.cpp — the machine's limits that the benchmarks divide by: what
// they measure, not how fast this machine is (speed is measured in bench/, never here).
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include <unistd.h>

#include <omp.h>

#include <catch2/catch.hpp>

#include "perf/calibration.hpp"

using namespace attncheck;

TEST_CASE("the DRAM stream outgrows the last-level cache: 512 MiB or four times the cache, at most a quarter of the memory") {
    const double llc = perf::last_level_cache_bytes(), bytes = perf::dram_buffer_bytes();
    const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    INFO("last-level cache " << llc << " bytes, buffer " << bytes << " bytes, memory " << memory);
    CHECK(llc >= 0);
    REQUIRE(memory > 0);
    CHECK(bytes <= memory / 4);
    if (memory / 4 >= 4 * llc && memory / 4 >= double(512 << 20)) {
        CHECK(bytes >= 4 * llc);
        CHECK(bytes >= double(512 << 20));
    }
}

TEST_CASE("read_gbs measures a positive, finite rate, memoized per MiB of the footprint") {
    const double small = perf::read_gbs(1.0);  // rounds up to the smallest buffer, 1 MiB
    CHECK(std::isfinite(small));
    CHECK(small > 0);
    const double r = perf::read_gbs(4.0 * (1 << 20));
    CHECK(std::isfinite(r));
    CHECK(r > 0);
    // The same MiB count is the same measurement: a benchmark and its report divide by one value.
    CHECK(perf::read_gbs(4.0 * (1 << 20) + 1000.0) == r);
    CHECK(perf::read_gbs(1.0) == small);
}

TEST_CASE("read_gbs is measured per team size: one thread's rate is not the whole team's") {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = perf::read_gbs(2.0 * (1 << 20));
    omp_set_num_threads(saved);
    CHECK(one > 0);
    if (saved > 1) {
        // A separate measurement, not the memo of the one-thread call: two timings never give
        // the same double, the memo returns the same one. Then each is memoized under its key.
        const double team = perf::read_gbs(2.0 * (1 << 20));
        CHECK(team > 0);
        CHECK(team != one);
        CHECK(perf::read_gbs(2.0 * (1 << 20)) == team);
        omp_set_num_threads(1);
        CHECK(perf::read_gbs(2.0 * (1 << 20)) == one);
        omp_set_num_threads(saved);
    }
}

TEST_CASE("PeakWindows weighs each timed window by its seconds at the mean of the runs around it") {
    perf::PeakWindows pw(1, 0.05);
    // No window timed yet: the memoized peak.
    CHECK(pw.peak_gflops() == perf::fma_peak_gflops(1));
    CHECK(pw.min_run_gflops() > 0);
    CHECK(pw.min_run_gflops() == pw.max_run_gflops());  // one run so far, at construction

    pw.add(0.03);
    CHECK_FALSE(pw.due());
    pw.add(0.03);
    REQUIRE(pw.due());
    pw.measure();
    CHECK_FALSE(pw.due());
    pw.add(0.01);
    pw.finish();  // the last, short window is closed too
    CHECK_FALSE(pw.due());
    // A mean of runs: between the lowest and the highest of them.
    CHECK(pw.peak_gflops() >= pw.min_run_gflops() * (1 - 1e-12));
    CHECK(pw.peak_gflops() <= pw.max_run_gflops() * (1 + 1e-12));
    CHECK(std::isfinite(pw.peak_gflops()));
    const double after = pw.peak_gflops();
    pw.finish();  // nothing pending: no run, no change
    CHECK(pw.peak_gflops() == after);
}

namespace {

// Windows whose probe returns the rates it is given, in turn: the weighting checked exactly.
class ScriptedWindows : public perf::RateWindows {
public:
    ScriptedWindows(std::vector<double> rates, double window) : RateWindows(window), rates_(std::move(rates)) { start(); }
    double mean(double fallback) const { return mean_or(fallback); }
    double lowest() const { return min_run(); }
    double highest() const { return max_run(); }
    std::size_t probes() const { return next_; }

private:
    double probe() override { return rates_.at(next_++); }
    std::vector<double> rates_;
    std::size_t next_ = 0;
};

}  // namespace

TEST_CASE("RateWindows weighs each window by its timed seconds at the mean of the probes on either side") {
    ScriptedWindows w({10.0, 30.0, 50.0}, 1.5);
    CHECK(w.probes() == 1);           // the run before the first window
    CHECK(w.mean(-1.0) == -1.0);      // no window closed: the fallback
    w.add(1.0);
    CHECK_FALSE(w.due());
    w.add(1.0);
    REQUIRE(w.due());
    w.measure();                      // 2 s at (10 + 30) / 2
    CHECK(w.probes() == 2);
    w.add(1.0);
    w.finish();                       // 1 s at (30 + 50) / 2
    w.finish();                       // nothing pending: no probe
    CHECK(w.probes() == 3);
    CHECK(w.timed_seconds() == 3.0);
    CHECK(w.mean(-1.0) == Approx((2.0 * 20.0 + 1.0 * 40.0) / 3.0).epsilon(1e-12));
    CHECK(w.lowest() == 10.0);
    CHECK(w.highest() == 50.0);
}

TEST_CASE("ReadWindows measures the read rate of a buffer of the benchmark's bytes between its windows") {
    const double bytes = 8.0 * (1 << 20);
    perf::ReadWindows rw(bytes, 0.01);
    CHECK(rw.read_gbs() == perf::read_gbs(bytes));  // no window yet: the process's rate
    CHECK(rw.min_run_gbs() > 0);
    CHECK(rw.min_run_gbs() == rw.max_run_gbs());
    for (int i = 0; i < 3; ++i) {
        rw.add(0.01);
        REQUIRE(rw.due());
        rw.measure();
    }
    rw.finish();
    CHECK(rw.timed_seconds() == Approx(0.03));
    CHECK(std::isfinite(rw.read_gbs()));
    CHECK(rw.read_gbs() >= rw.min_run_gbs() * (1 - 1e-12));
    CHECK(rw.read_gbs() <= rw.max_run_gbs() * (1 + 1e-12));
}
