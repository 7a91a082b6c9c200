// perf/omp_wait.cpp — the re-execution with a short OpenMP spin (omp_wait.hpp).
#include "perf/omp_wait.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace attncheck::perf {

void reexec_with_short_spin(char** argv, const char* who) {
    if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv);
    std::perror((std::string(who) + ": re-exec with GOMP_SPINCOUNT=10000 failed; going on").c_str());
}

}  // namespace attncheck::perf
