// attncheck/problem.hpp — building and checking an attncheck_problem (attncheck/kernel_abi.h).
//
// make_problem() fills every field from named sizes, so a caller never forgets abi_version or
// leaves a field unset; problem_error() is the argument check every built-in kernel shares.
#pragma once

#include <cstdint>
#include <string>

#include "attncheck/kernel_abi.h"

namespace attncheck {

// The fields of an attncheck_problem by name, with the ABI's defaults (abi_version is always
// ATTNCHECK_ABI_VERSION). Fill with designated initializers: make_problem({.heads = 2, ...}).
struct ProblemShape {
    int32_t batch = 1;
    int32_t heads = 1;
    int32_t q_len = 1;
    int32_t kv_len = 1;
    int32_t head_dim = 1;
    int32_t value_dim = 1;
    int32_t q_offset = 0;
    bool causal = false;
    const int32_t* kv_valid_len = nullptr;  // null, or batch counts (not copied)
    float scale = 1.0f;
};

attncheck_problem make_problem(const ProblemShape& s);

// Why a problem is malformed ("" when it is well formed): abi_version, sizes >= 1,
// q_offset >= 0, kv_valid_len[b] in [0, kv_len].
std::string problem_error(const attncheck_problem& p);

}  // namespace attncheck
