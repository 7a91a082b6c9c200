// properties/fuzz.hpp — the `attncheck fuzz` subcommand (the suite's main job).
#pragma once

#include <string>
#include <vector>

namespace attncheck::properties {

// Runs `attncheck fuzz ARGS...` (args are what follows "fuzz" on the command line).
// Returns the process exit code: 0 all pass, 1 something failed, 2 bad usage.
int fuzz_main(const std::vector<std::string>& args);

}  // namespace attncheck::properties
