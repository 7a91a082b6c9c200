// bench/slowdown.cpp — ATTNCHECK_INJECT_SLOWDOWN, parsed once (see slowdown.hpp).
#include "bench/slowdown.hpp"

#include <cstdlib>
#include <sstream>

namespace attncheck::bench {

namespace {

Slowdown parse(const char* v) {
    Slowdown s;
    const std::string text = v ? v : "";
    if (text.empty() || text == "0") return s;
    if (text == "1" || text == "reference") {
        s.reference_kernel = true;
        return s;
    }
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(x > 0 && x < 1))
        s.error = "ATTNCHECK_INJECT_SLOWDOWN=" + text +
                  ": expected 0, 1 (or reference: the reference kernel in place of the optimized one), "
                  "or a fraction 0 < s < 1 (every timed call takes 1 + s times as long)";
    else
        s.stretch = x;
    return s;
}

}  // namespace

const Slowdown& injected_slowdown() {
    static const Slowdown s = parse(std::getenv("ATTNCHECK_INJECT_SLOWDOWN"));
    return s;
}

std::string slowdown_label() {
    const Slowdown& s = injected_slowdown();
    if (s.reference_kernel) return "reference";
    if (s.stretch <= 0) return "0";
    std::ostringstream os;
    os << s.stretch;
    return os.str();
}

}  // namespace attncheck::bench
