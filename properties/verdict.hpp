// properties/verdict.hpp — what one property says about one case.
#pragma once

#include <string>

namespace attncheck::properties {

struct Verdict {
    enum class Kind { pass, fail, unsupported };
    Kind kind = Kind::pass;
    std::string message;  // fail: what went wrong, at which element, both values and the bound
    std::string note;     // pass with a remark worth counting (e.g. "batch result not bitwise")

    static Verdict pass() { return {}; }
    static Verdict pass_with_note(std::string n) { return {Kind::pass, {}, std::move(n)}; }
    static Verdict fail(std::string m) { return {Kind::fail, std::move(m), {}}; }
    static Verdict unsupported(std::string m) { return {Kind::unsupported, std::move(m), {}}; }
    bool failed() const { return kind == Kind::fail; }
};

}  // namespace attncheck::properties
