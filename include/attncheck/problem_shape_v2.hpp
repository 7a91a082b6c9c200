// attncheck/problem_shape_v2.hpp — building an attncheck_problem_v2 (attncheck/kernel_abi_v2.h):
// the fields that are not lengths, positions or tensors, set in one call, as make_problem() does
// for version 1 (attncheck/problem.hpp). Implemented in the reference library (problem_v2.cpp).
#pragma once

#include <cstdint>

#include "attncheck/kernel_abi_v2.h"

namespace attncheck {

// The fields of a problem that are not lengths, positions or tensors; make_problem_v2() sets them
// with abi_version and struct_size, and leaves the rest zero (null) for the caller.
struct ProblemShapeV2 {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    std::int32_t batch = 1, q_heads = 1, kv_heads = 1, head_dim = 1, value_dim = 1;
    bool causal = false;
    std::int32_t window_left = -1, window_right = -1;
    float scale = 1.0f, softcap = 0.0f;
};
attncheck_problem_v2 make_problem_v2(const ProblemShapeV2& s);

}  // namespace attncheck
