// tests/cli/fuzz_jobs_test.cpp — `attncheck fuzz --jobs N`: its report is --jobs 1's (the text
// apart from the closing line's seconds, --json apart from "seconds", --junit apart from "time"),
// on a passing selection and on one whose mutant kernel fails at kernel level (so that the
// decoder level's capped budget, decided after the kernel level, is in it too); bad values are
// exit 2 naming the flag. Budgets are small: these tests are about the report, not the kernels.
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using namespace cli_test;

// The report without its closing line ("all passed: 12 property runs, ... in 3.1 s (seed 1)"),
// whose seconds differ from run to run.
std::string without_closing_line(const std::string& out) {
    const auto last = out.rfind('\n', out.size() >= 2 ? out.size() - 2 : 0);
    return last == std::string::npos ? "" : out.substr(0, last + 1);
}

// A --json report with every "seconds" (and "shrink_seconds") removed.
nlohmann::json without_seconds(nlohmann::json j) {
    if (j.is_object()) {
        j.erase("seconds");
        j.erase("shrink_seconds");
        for (auto& [key, value] : j.items()) value = without_seconds(value);
    } else if (j.is_array()) {
        for (auto& value : j) value = without_seconds(value);
    }
    return j;
}

std::string without_times(const std::string& xml) { return std::regex_replace(xml, std::regex(" time=\"[^\"]*\""), ""); }

// Runs `args` with --jobs 1 and with --jobs 2 and requires the same report; returns the
// --jobs 2 run. --progress makes the parent of the workers say how many it started.
Result same_report(const TempDir& dir, const std::vector<std::string>& args, int code) {
    std::vector<std::string> one = args, two = args;
    one.insert(one.end(), {"--jobs", "1", "--json", dir.file("1.json"), "--junit", dir.file("1.xml")});
    two.insert(two.end(), {"--jobs", "2", "--json", dir.file("2.json"), "--junit", dir.file("2.xml"), "--progress"});
    const Result serial = run_cli(dir, one);
    INFO("--jobs 1: " << serial.describe());
    const Result parallel = run_cli(dir, two);
    INFO("--jobs 2: " << parallel.describe());
    REQUIRE(serial.code == code);
    REQUIRE(parallel.code == code);
    CHECK(parallel.err.find("done (2 processes)") != std::string::npos);
    CHECK(without_closing_line(serial.out).size() > 100);
    CHECK(without_closing_line(parallel.out) == without_closing_line(serial.out));
    CHECK(without_seconds(nlohmann::json::parse(slurp(dir.file("2.json")))) ==
          without_seconds(nlohmann::json::parse(slurp(dir.file("1.json")))));
    CHECK(without_times(slurp(dir.file("2.xml"))) == without_times(slurp(dir.file("1.xml"))));
    return parallel;
}

}  // namespace

TEST_CASE("fuzz --jobs 2 reports a passing selection exactly as --jobs 1", "[cli][fuzz][jobs]") {
    TempDir dir;
    // Two kernels and the reference decoder: kernel rows, decoder rows, "not applicable" lines.
    const Result r = same_report(dir,
                                 {"fuzz", "--kernel", "optimized", "--kernel", "reference", "--decoder", "reference",
                                  "--property", "agreement,causality,determinism,grad_agreement,logits_causality,incremental",
                                  "--cases", "12", "--seed", "3"},
                                 0);
    CHECK(r.out.find("all passed: ") != std::string::npos);
}

TEST_CASE("fuzz --jobs 2 reports a failing mutant exactly as --jobs 1, capped decoder budget included",
          "[cli][fuzz][jobs]") {
    TempDir dir;
    // No --cases: the mutant's decoder-level run is capped (10 cases) once its kernel level has
    // failed, which --jobs decides between its two phases. --shrink-time 0: the counterexample
    // must not depend on how fast either run was.
    const Result r = same_report(dir,
                                 {"fuzz", "--kernel", "diagonal_masked", "--property", "agreement,row_sums,logits_causality",
                                  "--seed", "1", "--shrink-time", "0"},
                                 1);
    CHECK(r.out.find("agreement FAIL on kernel diagonal_masked at case ") != std::string::npos);
    CHECK(r.out.find("note: optimized[diagonal_masked]: decoder-level properties ran 10 cases each, not 40") !=
          std::string::npos);
}

TEST_CASE("fuzz --jobs refuses a bad value, naming the flag", "[cli][fuzz][jobs]") {
    TempDir dir;
    for (const std::string bad : {"0", "-1", "257", "two", "2x", ""}) {
        const Result r = run_cli(dir, {"fuzz", "--kernel", "reference", "--cases", "5", "--jobs", bad});
        INFO("--jobs '" << bad << "': " << r.describe());
        CHECK(r.code == 2);
        CHECK(r.err.find("attncheck fuzz: --jobs") != std::string::npos);
        CHECK(r.out.find("attncheck fuzz: seed") == std::string::npos);
    }
}
