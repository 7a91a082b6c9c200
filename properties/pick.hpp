// properties/pick.hpp — a weighted choice for the case generator that shrinks towards its first
// option (gen::weightedElement does not shrink): one integer draw, mapped onto the options by
// their weights. Used by kernel_case_gen.cpp.
#pragma once

#include <initializer_list>
#include <utility>

#include <rapidcheck.h>

namespace attncheck::properties {

// One of `options`, a non-empty range of (weight, value) pairs (a list made at run time, such as
// the dtypes a kernel declares).
template <class Options>
auto pick_in(const Options& options, const char* label) {
    int total = 0;
    for (const auto& o : options) total += o.first;
    // At full size: RapidCheck scales ranges by the case size, which would make the first
    // cases all pick the first option; the choice of style, mode or batch should not wait.
    int r = *rc::gen::resize(100, rc::gen::inRange(0, total)).as(label);
    for (const auto& o : options) {
        if (r < o.first) return o.second;
        r -= o.first;
    }
    return options.begin()->second;  // unreachable: r < total
}

template <class T>
T pick(std::initializer_list<std::pair<int, T>> options, const char* label) {
    return pick_in(options, label);
}

}  // namespace attncheck::properties
