// optimized/parallel_tasks.hpp — the OpenMP team that the version 2 kernels (forward and
// backward) split their work over.
#pragma once

#include <cstddef>

namespace attncheck::optimized {

// Runs task(n) for every n < count on an OpenMP team with a dynamic schedule (one task at a time:
// the tasks differ in cost), after every thread of the team has run reserve() (sizing its
// thread_local scratch), whether or not the schedule then hands it a task. No exception may cross
// an OpenMP region: a thread whose reserve() throws (a failed allocation) runs no task, and the
// call returns false, which the kernel reports as "unsupported".
template <class Reserve, class Task>
bool parallel_tasks(std::size_t count, const Reserve& reserve, const Task& task) {
    bool failed = false;
#pragma omp parallel
    {
        bool ready = true;
        try {
            reserve();
        } catch (...) {
            ready = false;
#pragma omp atomic write
            failed = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (std::size_t n = 0; n < count; ++n)
            if (ready) task(n);
    }
    return !failed;
}

}  // namespace attncheck::optimized
