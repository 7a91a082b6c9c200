// properties/runner.cpp — RapidCheck's checkProperty with explicit TestParams and a listener.
#include "properties/runner.hpp"

#include <chrono>
#include <sstream>

#include <rapidcheck.h>

namespace attncheck::properties {

const char* to_string(Status s) {
    switch (s) {
        case Status::pass: return "pass";
        case Status::fail: return "FAIL";
        case Status::unsupported: return "unsupported";
        case Status::error: return "ERROR";
        case Status::skipped: return "skipped";
    }
    return "?";
}

namespace {

// Counts finished cases for the progress line; stays silent otherwise (the default listener
// would print RapidCheck's own verbose output).
class ProgressListener : public rc::detail::TestListener {
public:
    explicit ProgressListener(const Progress& p) : progress_(p) {}
    void onTestCaseFinished(const rc::detail::CaseDescription&) override {
        ++done_;
        if (progress_) progress_(done_);
    }
    void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}

private:
    const Progress& progress_;
    int done_ = 0;
};

}  // namespace

PropertyResult run_property(const std::string& property, const std::function<Verdict()>& one_case,
                            const RunParams& params, const Progress& progress) {
    PropertyResult out;
    out.property = property;
    int unsupported = 0, notes = 0;
    std::string first_note;
    const auto testable = [&] {
        const Verdict v = one_case();
        switch (v.kind) {
            case Verdict::Kind::unsupported:
                ++unsupported;
                RC_TAG("unsupported");
                return;
            case Verdict::Kind::fail:
                throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, v.message);
            case Verdict::Kind::pass:
                if (!v.note.empty()) {
                    ++notes;
                    if (first_note.empty()) first_note = v.note;
                }
                return;
        }
    };
    rc::detail::TestParams tp;
    tp.seed = params.seed;
    tp.maxSuccess = params.cases;
    tp.maxSize = 100;
    tp.maxDiscardRatio = 10;
    rc::detail::TestMetadata meta;
    meta.id = property;
    meta.description = property;
    ProgressListener listener(progress);
    const auto t0 = std::chrono::steady_clock::now();
    const rc::detail::TestResult result = rc::detail::checkTestable(testable, meta, tp, listener);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    rc::detail::SuccessResult success;
    rc::detail::FailureResult failure;
    rc::detail::GaveUpResult gave_up;
    rc::detail::Error error;
    if (result.match(success)) {
        out.cases = success.numSuccess;
        out.unsupported = unsupported;
        out.notes = notes;
        out.note = first_note;
        for (const auto& [tags, count] : success.distribution) {
            std::string key;
            for (const auto& t : tags) key += (key.empty() ? "" : ", ") + t;
            if (!key.empty()) out.spread[key] += count;
        }
        if (out.cases > 0 && out.unsupported == out.cases) {
            out.status = Status::unsupported;
            out.message = "the kernel returned \"unsupported\" for every one of the " +
                          std::to_string(out.cases) + " cases: nothing was checked";
        }
    } else if (result.match(failure)) {
        out.status = Status::fail;
        out.cases = failure.numSuccess;
        out.failed_at = failure.numSuccess + 1;
        out.message = failure.description;
        std::ostringstream ce;
        for (const auto& [label, value] : failure.counterExample) ce << "  " << label << " = " << value << "\n";
        out.counterexample = ce.str();
    } else if (result.match(gave_up)) {
        out.status = Status::error;
        out.cases = gave_up.numSuccess;
        out.message = "gave up: " + gave_up.description;
    } else if (result.match(error)) {
        out.status = Status::error;
        out.message = "RapidCheck error: " + error.description;
    }
    return out;
}

std::string replay_command(const std::string& subject_flag, const std::string& property, const RunParams& p) {
    std::ostringstream s;
    s << "attncheck fuzz " << subject_flag << " --property " << property << " --seed " << p.seed << " --cases "
      << p.cases;
    return s.str();
}

}  // namespace attncheck::properties
