// tests/zoo/shrink_budget_test.cpp — run_property's wall-clock budget for shrinking
// (RunParams::shrink_budget_s): a failure whose shrink steps are slow gets its verdict within
// the budget, the report says that shrinking stopped, and it shows a case that really failed.
#include <catch2/catch.hpp>

#include <rapidcheck.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "properties/runner.hpp"

using namespace attncheck::properties;

namespace {

// A case function whose evaluations cost step_ms each; every list with a value >= 100 fails.
// Shrinking a list of 50 values to the single failing one takes hundreds of steps: at 20 ms a
// step, far more than a budget of 0.3 s.
std::function<Verdict(const CaseInfo&)> slow_case(int step_ms) {
    return [step_ms](const CaseInfo&) {
        const auto values = *rc::gen::container<std::vector<int>>(50, rc::gen::inRange(0, 1000)).as("values");
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        for (const int v : values)
            if (v >= 100) return Verdict::fail("value " + std::to_string(v) + " >= 100");
        return Verdict::pass();
    };
}

}  // namespace

TEST_CASE("shrinking stops at its budget and reports the smallest failure found by then") {
    const double budget = 0.3;
    const auto t0 = std::chrono::steady_clock::now();
    const PropertyResult r = run_property("slow", slow_case(20), RunParams{7, 100, budget});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.counterexample << r.message);
    REQUIRE(r.status == Status::fail);
    CHECK(r.failed_at >= 1);
    CHECK(r.shrink_stopped);
    CHECK(r.shrink_seconds >= budget);
    // The budget, one step that was running when it ran out, and the cheap rest.
    CHECK(seconds < budget + 1.0);
    // Not RapidCheck's re-evaluation of the case (skipped once the budget is spent): the failure.
    CHECK(r.message.find(">= 100") != std::string::npos);
    REQUIRE(r.counterexample_values.size() == 1);
    CHECK(r.counterexample_values[0].first == "values");
    CHECK(r.counterexample.find("values = ") != std::string::npos);
}

TEST_CASE("without a budget shrinking runs to the end") {
    const PropertyResult r = run_property("fast", slow_case(0), RunParams{7, 100, 0});
    INFO(r.counterexample << r.message);
    REQUIRE(r.status == Status::fail);
    CHECK_FALSE(r.shrink_stopped);
    CHECK(r.message == "value 100 >= 100");  // fully shrunk: the smallest failing value
}

TEST_CASE("the case function is told the case number, from 1 like failed_at, and the shrink step") {
    std::vector<CaseInfo> seen;
    const PropertyResult r = run_property(
        "numbered",
        [&](const CaseInfo& at) {
            seen.push_back(at);
            const int x = *rc::gen::inRange(0, 1000).as("x");
            return at.number == 5 || (at.shrink_step > 0 && x >= 0) ? Verdict::fail("case " + std::to_string(at.number))
                                                                    : Verdict::pass();
        },
        RunParams{3, 20, 0});
    REQUIRE(r.status == Status::fail);
    CHECK(r.failed_at == 5);
    REQUIRE(seen.size() >= 5);
    for (int i = 0; i < 5; ++i) {
        CHECK(seen[std::size_t(i)].number == i + 1);
        CHECK(seen[std::size_t(i)].shrink_step == 0);
    }
    for (std::size_t i = 5; i < seen.size(); ++i) {
        CHECK(seen[i].number == 5);
        CHECK(seen[i].shrink_step == int(i) - 4);
    }
}
