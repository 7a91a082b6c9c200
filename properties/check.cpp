// properties/check.cpp — check_kernel(): every property on one linked kernel, in process, with a
// report a person reads in a test log (include/attncheck/check.hpp).
#include "attncheck/check.hpp"
#include "attncheck/declaration.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "properties/property_runs.hpp"

namespace attncheck {
namespace {

using namespace attncheck::properties;

// The seed when none is given: fixed, so that an outside project's CI is reproducible (a new
// seed per run finds more over time: set ATTNCHECK_SEED from the CI job's id for that).
constexpr std::uint64_t kDefaultCheckSeed = 20240611;

std::uint64_t parse_u64(const char* var, const std::string& text) {
    try {
        std::size_t used = 0;
        const unsigned long long v = std::stoull(text, &used);
        if (used == text.size() && !text.empty() && text[0] != '-') return v;
    } catch (const std::exception&) {
    }
    throw std::invalid_argument(std::string(var) + "=" + text + ": expected a non-negative integer");
}


std::string cell(const PropertyResult& r) {
    std::ostringstream s;
    switch (r.status) {
        case Status::pass:
            s << "pass (" << r.cases - r.vacuous << " cases";
            if (r.unsupported) s << ", " << r.unsupported << " unsupported";
            if (r.vacuous) s << ", " << r.vacuous << " with nothing to check";
            s << ")";
            break;
        case Status::fail: s << "FAIL at case " << r.failed_at; break;
        case Status::not_checked:
            s << "NOT CHECKED (" << r.cases - r.unsupported << " of " << r.cases << " cases supported)";
            break;
        case Status::error: s << "ERROR"; break;
        case Status::skipped: s << "skipped"; break;
        case Status::not_applicable: s << "not applicable: " << r.message; break;
    }
    return s.str();
}

// The replay line of a failure: `format` with {seed}, {cases} and {property} filled in, or the
// environment variables check_kernel() reads and "<this test binary>".
std::string replay_line(const std::string& format, std::uint64_t seed, int cases, const std::string& property) {
    if (format.empty())
        return "ATTNCHECK_SEED=" + std::to_string(seed) + " ATTNCHECK_CASES=" + std::to_string(cases) +
               " ATTNCHECK_PROPERTY=" + property + " <this test binary>";
    std::string line;
    for (std::size_t i = 0; i < format.size();) {
        const auto fill = [&](const char* field, const std::string& value) {
            const std::string f = field;
            if (format.compare(i, f.size(), f) != 0) return false;
            line += value;
            i += f.size();
            return true;
        };
        if (fill("{seed}", std::to_string(seed)) || fill("{cases}", std::to_string(cases)) ||
            fill("{property}", property))
            continue;
        line += format[i++];
    }
    return line;
}

}  // namespace

CheckOptions CheckOptions::from_environment(CheckOptions o) {
    if (const char* s = std::getenv("ATTNCHECK_SEED")) o.seed = parse_u64("ATTNCHECK_SEED", s);
    if (const char* s = std::getenv("ATTNCHECK_CASES")) {
        const std::uint64_t n = parse_u64("ATTNCHECK_CASES", s);
        if (n < 1 || n > 100000000) throw std::invalid_argument(std::string("ATTNCHECK_CASES=") + s + ": expected 1 to 1e8");
        o.cases = o.decoder_cases = int(n);
    }
    if (const char* s = std::getenv("ATTNCHECK_PROPERTY")) {
        o.only.clear();
        std::stringstream list(s);
        for (std::string name; std::getline(list, name, ',');)
            if (!name.empty()) o.only.push_back(name);
    }
    return o;
}

CheckOptions CheckOptions::from_environment() { return from_environment(CheckOptions{}); }

namespace {

// check_kernel() of either version: `kernel` has fn or fn_v2 set, and no declaration yet.
CheckReport check(KernelUnderTest kernel, const CheckOptions& options) {
    const std::string& name = kernel.name;
    const bool v2 = kernel.fn_v2 != nullptr;
    if (options.cases < 1 || options.decoder_cases < 1)
        throw std::invalid_argument("check_kernel(" + name + "): cases and decoder_cases must be at least 1");
    if (!(options.shrink_time_s >= 0))
        throw std::invalid_argument("check_kernel(" + name + "): shrink_time_s must be 0 (no limit) or more");
    std::vector<std::string> only;
    for (const std::string& p : options.only) {
        if (!is_property(p))
            throw std::invalid_argument("check_kernel(" + name + "): no property named '" + p +
                                        "' (see `attncheck fuzz --list`)");
        only.push_back(canonical_property_name(p));
    }
    const auto selected = [&](const std::string& p) {
        return only.empty() || std::find(only.begin(), only.end(), p) != only.end();
    };

    CheckReport report;
    report.seed = options.seed != 0 ? options.seed : kDefaultCheckSeed;
    std::vector<PropertyResult> results;
    std::vector<int> budgets;
    std::string not_applicable_lines;  // properties outside the declaration
    // An outside kernel may block differently per batch size: within tolerance is enough.
    KernelDeclaration declaration;
    try {
        declaration = KernelDeclaration::parse(options.declaration);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("check_kernel(" + name + "): " + e.what());
    }
    kernel.declaration = checked_declaration(declaration, v2);
    kernel.declaration.set_backward(v2 && kernel.backward);
    std::string without_backward;  // the gradient properties of a kernel without a backward, on one line
    for (const auto& prop : kernel_properties()) {
        if (!selected(prop.name) || (!v2 && needs_abi_v2(prop))) continue;  // the latter on one line, below
        if (v2 && !kernel.backward && needs_backward(prop)) {
            without_backward += (without_backward.empty() ? "" : ", ") + prop.name;
            continue;
        }
        if (const std::string why = not_applicable(prop, kernel.declaration); !why.empty()) {
            not_applicable_lines += "  " + prop.name + ": not applicable (" + why + ")\n";
            continue;
        }
        results.push_back(run_kernel_property(prop, kernel, RunParams{report.seed, options.cases, options.shrink_time_s}));
        budgets.push_back(options.cases);
    }
    if (const std::string names = v2 ? "" : abi_v1_lacks(selected); !names.empty())
        not_applicable_lines += "  " + std::string(kAbiV1LacksLine) + names + "\n";
    if (!without_backward.empty()) not_applicable_lines += "  " + std::string(kNoBackwardLine) + without_backward + "\n";
    // The kernel runs in the decoder when its declaration lets the decoder call it.
    const std::string no_decoder = decoder_unavailable(declaration, v2);
    const bool decoder_level = options.decoder && no_decoder.empty();
    if (options.decoder && !no_decoder.empty())
        not_applicable_lines += "  decoder-level properties: not run (" + no_decoder + ")\n";
    if (decoder_level) {
        // With its backward pass, when it has one: the training step's properties.
        const DecoderUnderTest decoder = v2 ? DecoderUnderTest{"optimized[" + name + "]", kernel.fn_v2, declaration, kernel.backward}
                                            : DecoderUnderTest{"optimized[" + name + "]", kernel.fn, declaration};
        std::string decoder_without_backward;
        for (const DecoderProperty& prop : decoder_properties()) {
            if (!selected(prop.name)) continue;
            if (const std::string why = decoder_not_applicable(prop, decoder.declaration, v2); !why.empty()) {
                if (lacks_backward(prop, decoder.declaration))
                    decoder_without_backward += (decoder_without_backward.empty() ? "" : ", ") + prop.name;
                else
                    not_applicable_lines += "  " + prop.name + ": not applicable (" + why + ")\n";
                continue;
            }
            results.push_back(run_decoder_property(prop, decoder, RunParams{report.seed, options.decoder_cases, options.shrink_time_s}));
            budgets.push_back(options.decoder_cases);
        }
        if (!decoder_without_backward.empty())
            not_applicable_lines += "  " + std::string(kNoBackwardLine) + decoder_without_backward + "\n";
    }

    std::ostringstream t;
    t << "attncheck check_kernel(" << name << "): seed " << report.seed << ", " << options.cases
      << " cases per kernel property" << (decoder_level ? ", " + std::to_string(options.decoder_cases) +
                                                                 " per decoder property (kernel in the optimized decoder)"
                                                           : std::string())
      << "\n";
    if (!declaration.is_default()) t << "declared: " << declaration.to_string() << "\n";
    t << not_applicable_lines;
    std::size_t w = 0;
    for (const auto& r : results) w = std::max(w, r.property.size());
    for (const auto& r : results) t << "  " << std::left << std::setw(int(w)) << r.property << "  " << cell(r) << "\n";
    for (const auto& r : results)
        if (!r.warning.empty()) t << "warning: " << r.property << ": " << r.warning << "\n";
    for (std::size_t i = 0; i < results.size(); ++i) {
        const PropertyResult& r = results[i];
        std::string status = to_string(r.status);  // the report's words, lower case ("FAIL" -> "fail")
        for (char& ch : status) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        CheckedProperty c{r.property, status, r.cases, r.unsupported, budgets[i], r.failed_at,
                          r.counterexample, r.message, r.warning, "", r.seconds, r.shrink_stopped};
        if (fails_run(r.status, options.allow_unchecked)) {
            report.failed.push_back(r.property);
            c.replay = replay_line(options.replay, report.seed, budgets[i], r.property);
            t << "\n" << r.property << " " << to_string(r.status) << " on " << name;
            if (r.status == Status::fail)
                t << " at case " << r.failed_at << (r.counterexample.empty() ? "" : ", shrunk to:");
            t << "\n" << r.counterexample << "  " << r.message << "\n  replay: " << c.replay << "\n";
        }
        report.properties.push_back(std::move(c));
    }
    report.passed = report.failed.empty() && !results.empty();
    if (results.empty()) t << "no property selected: nothing was checked\n";
    t << "\n" << (report.passed ? "passed: " : "FAILED: ") << results.size() - report.failed.size() << " of "
      << results.size() << " properties passed\n";
    report.text = t.str();
    return report;
}

}  // namespace

CheckReport check_kernel(attncheck_kernel_fn fn, const std::string& name, const CheckOptions& options) {
    if (!fn) throw std::invalid_argument("check_kernel(" + name + "): the kernel function pointer is null");
    return check(KernelUnderTest{name, fn, false}, options);
}

CheckReport check_kernel(attncheck_kernel_v2_fn fn, const std::string& name, const CheckOptions& options) {
    if (!fn) throw std::invalid_argument("check_kernel(" + name + "): the kernel function pointer is null");
    KernelUnderTest kernel{name, nullptr, false};
    kernel.fn_v2 = fn;
    return check(kernel, options);
}

CheckReport check_kernel(attncheck_kernel_v2_fn fn, attncheck_kernel_v2_backward_fn backward, const std::string& name,
                         const CheckOptions& options) {
    if (!fn) throw std::invalid_argument("check_kernel(" + name + "): the kernel function pointer is null");
    if (!backward) throw std::invalid_argument("check_kernel(" + name + "): the backward function pointer is null");
    KernelUnderTest kernel{name, nullptr, false};
    kernel.fn_v2 = fn;
    kernel.backward = backward;
    return check(kernel, options);
}

}  // namespace attncheck
