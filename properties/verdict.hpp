// properties/verdict.hpp — what one property says about one case.
#pragma once

#include <string>

namespace attncheck::properties {

struct Verdict {
    // vacuous: the case has nothing for the property to check (nothing to split in a single
    // query row, ...): not counted as a checked case, and a property vacuous on every case is
    // "not applicable", never "pass".
    enum class Kind { pass, fail, unsupported, vacuous };
    Kind kind = Kind::pass;
    std::string message;  // fail: what went wrong, at which element, both values and the bound;
                          // vacuous: why there is nothing to check
    std::string note;     // pass with a remark worth counting (e.g. "batch result not bitwise")

    static Verdict pass() { return {}; }
    static Verdict pass_with_note(std::string n) { return {Kind::pass, {}, std::move(n)}; }
    static Verdict fail(std::string m) { return {Kind::fail, std::move(m), {}}; }
    static Verdict unsupported(std::string m) { return {Kind::unsupported, std::move(m), {}}; }
    static Verdict vacuous(std::string why) { return {Kind::vacuous, std::move(why), {}}; }
    bool failed() const { return kind == Kind::fail; }
};

}  // namespace attncheck::properties
