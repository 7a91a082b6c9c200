// attncheck/error.hpp — the two kinds of error the project raises.
//
// InputError: the user gave us something bad (a malformed model file, a wrong shape, an
// out-of-range token, a bad flag). The command line maps it to exit code 2 and prints what().
// Every message names the problem: which tensor, which field, what was expected, what was found.
#pragma once

#include <stdexcept>
#include <string>

namespace attncheck {

struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace attncheck
