// properties/runner.cpp — RapidCheck's checkProperty with explicit TestParams and a listener.
#include "properties/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <rapidcheck.h>
#include <rapidcheck/detail/Serialization.h>

namespace attncheck::properties {

const char* to_string(Status s) {
    switch (s) {
        case Status::pass: return "pass";
        case Status::fail: return "FAIL";
        case Status::not_checked: return "not checked";
        case Status::error: return "ERROR";
        case Status::skipped: return "skipped";
        case Status::not_applicable: return "not applicable";
    }
    return "?";
}

bool fails_run(Status s, bool allow_unchecked) {
    return s != Status::pass && s != Status::not_applicable && !(s == Status::not_checked && allow_unchecked);
}

namespace {

// Counts finished cases for the progress line, and keeps the latest failure (the first, then
// each accepted shrink); stays silent otherwise (the default listener would print RapidCheck's
// own verbose output).
class ProgressListener : public rc::detail::TestListener {
public:
    explicit ProgressListener(const Progress& p) : progress_(p) {}
    void onTestCaseFinished(const rc::detail::CaseDescription& c) override {
        ++done_;
        if (progress_) progress_(done_);
        keep_failure(c);
    }
    void onShrinkTried(const rc::detail::CaseDescription& c, bool accepted) override {
        if (accepted) keep_failure(c);
    }
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}

    // RapidCheck evaluates the shrunk case once more to report it; after the shrink budget is
    // spent that evaluation is skipped (it "passes"), so the report uses these instead.
    std::string failure_message;
    rc::detail::Example failure_example;

private:
    void keep_failure(const rc::detail::CaseDescription& c) {
        if (c.result.type != rc::detail::CaseResult::Type::Failure) return;
        failure_message = c.result.description;
        failure_example = c.example ? c.example() : rc::detail::Example{};
    }
    const Progress& progress_;
    int done_ = 0;
};

}  // namespace

PropertyResult run_property(const std::string& property, const std::function<Verdict()>& one_case,
                            const RunParams& params, const Progress& progress) {
    return run_property(property, [&](const CaseInfo&) { return one_case(); }, params, progress);
}

namespace {

// One property run as RapidCheck sees it: it calls the testable for the generated cases, and
// after the first failure only for shrink candidates of it (the first failure is where shrinking
// starts). Counts what the result needs and stops shrinking when the budget is spent.
struct CaseLoop {
    const std::function<Verdict(const CaseInfo&)>& one_case;
    const RunParams& params;
    CaseInfo at{};
    int unsupported = 0, vacuous = 0, notes = 0;
    std::string first_note{}, vacuous_reason{};
    bool shrinking = false;
    bool shrink_stopped = false;
    std::chrono::steady_clock::time_point shrink_start{};

    double shrink_elapsed() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - shrink_start).count();
    }

    void run_case() {
        if (shrinking) {
            ++at.shrink_step;
            if (params.shrink_budget_s > 0 && shrink_elapsed() >= params.shrink_budget_s) {
                shrink_stopped = true;
                return;  // "passes": RapidCheck keeps the smallest failure it has
            }
        }
        const Verdict v = one_case(at);
        switch (v.kind) {
            case Verdict::Kind::unsupported:
                if (!shrinking) {
                    ++unsupported;
                    ++at.number;
                }
                RC_TAG("unsupported");
                return;
            case Verdict::Kind::vacuous:
                if (!shrinking) {
                    ++vacuous;
                    ++at.number;
                    if (vacuous_reason.empty()) vacuous_reason = v.message;
                }
                RC_TAG("nothing to check");
                return;
            case Verdict::Kind::fail:
                if (!shrinking) {
                    shrinking = true;
                    shrink_start = std::chrono::steady_clock::now();
                }
                throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, v.message);
            case Verdict::Kind::pass:
                if (shrinking) return;
                ++at.number;
                if (!v.note.empty()) {
                    ++notes;
                    if (first_note.empty()) first_note = v.note;
                }
                return;
        }
    }
};

// Every case passed or was unsupported: the spread, and whether enough were supported.
void read_success(const rc::detail::SuccessResult& success, const CaseLoop& loop, int budget, PropertyResult& out) {
    out.cases = success.numSuccess;
    out.unsupported = loop.unsupported;
    out.vacuous = loop.vacuous;
    out.vacuous_reason = loop.vacuous_reason;
    out.notes = loop.notes;
    out.note = loop.first_note;
    for (const auto& [tags, count] : success.distribution) {
        std::string key;
        for (const auto& t : tags) key += (key.empty() ? "" : ", ") + t;
        if (!key.empty()) out.spread[key] += count;
    }
    const int supported = out.cases - out.unsupported;
    const int needed = std::min(kMinSupportedCases, budget);
    if (out.vacuous > 0 && out.vacuous == supported) {
        out.status = Status::not_applicable;
        out.message = "nothing to check on any of the " + std::to_string(out.cases) + " cases (" + out.vacuous_reason + ")";
    } else if (out.cases > 0 && supported < needed) {
        out.status = Status::not_checked;
        out.message = "the kernel returned \"unsupported\" for " + std::to_string(out.unsupported) + " of the " +
                      std::to_string(out.cases) + " cases: " + std::to_string(supported) +
                      " supported, fewer than the " + std::to_string(needed) +
                      " a verdict needs (declare what the kernel supports: the cases then fit it)";
    } else if (out.unsupported > kWarnUnsupportedFraction * out.cases) {
        out.warning = std::to_string(out.unsupported) + " of " + std::to_string(out.cases) +
                      " cases unsupported (more than 20%): checked on " + std::to_string(supported) + " only";
    }
}

const char kHex[] = "0123456789abcdef";

std::string to_hex(const rc::detail::Reproduce& r) {
    std::vector<std::uint8_t> bytes;
    rc::detail::serialize(r, std::back_inserter(bytes));
    std::string hex;
    for (const std::uint8_t b : bytes) {
        hex += kHex[b >> 4];
        hex += kHex[b & 15];
    }
    return hex;
}

// The Reproduce that to_hex wrote; throws std::invalid_argument naming what is wrong.
rc::detail::Reproduce from_hex(const std::string& hex) {
    if (hex.empty() || hex.size() % 2) throw std::invalid_argument("not an even number of hex digits");
    std::vector<std::uint8_t> bytes;
    for (std::size_t i = 0; i < hex.size(); i += 2) {
        const char* hi = std::strchr(kHex, hex[i]);
        const char* lo = std::strchr(kHex, hex[i + 1]);
        if (!hex[i] || !hex[i + 1] || !hi || !lo) throw std::invalid_argument("a character that is not a lower-case hex digit");
        bytes.push_back(std::uint8_t((hi - kHex) << 4 | (lo - kHex)));
    }
    rc::detail::Reproduce r;
    try {
        if (rc::detail::deserialize(bytes.begin(), bytes.end(), r) != bytes.end())
            throw std::invalid_argument("bytes left over after the case");
    } catch (const rc::detail::SerializationException& e) {
        throw std::invalid_argument(std::string("not a RapidCheck case: ") + e.what());
    }
    if (r.size < 0 || r.size > 100000) throw std::invalid_argument("a size out of range");
    return r;
}

// A case failed: where, the shrunk counterexample and its message (the listener's copy when the
// shrink budget ran out, since RapidCheck's own final evaluation then "passed").
void read_failure(const rc::detail::FailureResult& failure, const CaseLoop& loop, const ProgressListener& listener,
                  PropertyResult& out) {
    out.status = Status::fail;
    out.cases = failure.numSuccess;
    out.failed_at = failure.numSuccess + 1;
    out.shrink_stopped = loop.shrink_stopped;
    const bool from_listener = out.shrink_stopped && !listener.failure_message.empty();
    out.message = from_listener ? listener.failure_message : failure.description;
    std::ostringstream ce;
    for (const auto& [label, value] : from_listener ? listener.failure_example : failure.counterExample) {
        ce << "  " << label << " = " << value << "\n";
        out.counterexample_values.emplace_back(label, value);
    }
    out.counterexample = ce.str();
    out.reproduce = to_hex(failure.reproduce);
    out.shrink_seconds = loop.shrinking ? loop.shrink_elapsed() : 0;
}

}  // namespace

PropertyResult run_property(const std::string& property, const std::function<Verdict(const CaseInfo&)>& one_case,
                            const RunParams& params, const Progress& progress) {
    PropertyResult out;
    out.property = property;
    CaseLoop loop{.one_case = one_case, .params = params};
    rc::detail::TestParams tp;
    tp.seed = params.seed;
    tp.maxSuccess = params.cases;
    tp.maxSize = 100;
    tp.maxDiscardRatio = 10;
    rc::detail::TestMetadata meta;
    meta.id = property;
    meta.description = property;
    ProgressListener listener(progress);
    std::unordered_map<std::string, rc::detail::Reproduce> reproduce;
    if (!params.reproduce.empty()) {
        try {
            reproduce[meta.id] = from_hex(params.reproduce);
        } catch (const std::invalid_argument& e) {
            out.status = Status::error;
            out.message = "the case to reproduce does not decode: " + std::string(e.what());
            return out;
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    // The testable is copied by RapidCheck: it refers to the loop, which holds the state.
    const rc::detail::TestResult result =
        rc::detail::checkTestable([&loop] { loop.run_case(); }, meta, tp, listener, reproduce);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    rc::detail::SuccessResult success;
    rc::detail::FailureResult failure;
    rc::detail::GaveUpResult gave_up;
    rc::detail::Error error;
    if (result.match(success)) {
        read_success(success, loop, params.cases, out);
    } else if (result.match(failure)) {
        read_failure(failure, loop, listener, out);
    } else if (result.match(gave_up)) {
        out.status = Status::error;
        out.cases = gave_up.numSuccess;
        out.message = "gave up: " + gave_up.description;
    } else if (result.match(error) && !params.reproduce.empty() && loop.at.number > 1) {
        // RapidCheck calls a reproduced case that passes an error; here it is the news that the
        // case passes now (a corpus entry that was fixed).
        out.status = loop.unsupported ? Status::not_checked : Status::pass;
        out.cases = 1;
        out.unsupported = loop.unsupported;
        out.vacuous = loop.vacuous;
        if (loop.unsupported) out.message = "the kernel refused (returned \"unsupported\" for) the case to reproduce";
    } else if (result.match(error)) {
        out.status = Status::error;
        out.message = "RapidCheck error: " + error.description;
    }
    return out;
}

std::string reproduce_problem(const std::string& reproduce) {
    try {
        (void)from_hex(reproduce);
        return "";
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
}

std::string replay_command(const std::string& subject_flag, const std::string& property, const RunParams& p) {
    std::ostringstream s;
    s << "attncheck fuzz " << subject_flag << " --property " << property << " --seed " << p.seed << " --cases "
      << p.cases;
    return s.str();
}

}  // namespace attncheck::properties
