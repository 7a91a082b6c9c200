// reference/problem.cpp — make_problem() and the argument check shared by the built-in kernels
// (attncheck/problem.hpp).
#include <sstream>

#include "attncheck/problem.hpp"

namespace attncheck {

attncheck_problem make_problem(const ProblemShape& s) {
    return {.abi_version = ATTNCHECK_ABI_VERSION, .batch = s.batch, .heads = s.heads, .q_len = s.q_len,
            .kv_len = s.kv_len, .head_dim = s.head_dim, .value_dim = s.value_dim, .q_offset = s.q_offset,
            .causal = s.causal ? 1 : 0, .kv_valid_len = s.kv_valid_len, .scale = s.scale};
}

std::string problem_error(const attncheck_problem& p) {
    std::ostringstream e;
    if (p.abi_version != ATTNCHECK_ABI_VERSION) {
        e << "abi_version " << p.abi_version << " is not " << ATTNCHECK_ABI_VERSION;
        return e.str();
    }
    const struct { const char* name; int32_t value; } sizes[] = {
        {"batch", p.batch}, {"heads", p.heads}, {"q_len", p.q_len}, {"kv_len", p.kv_len},
        {"head_dim", p.head_dim}, {"value_dim", p.value_dim}};
    for (const auto& s : sizes)
        if (s.value < 1) {
            e << s.name << " = " << s.value << " (must be >= 1)";
            return e.str();
        }
    if (p.q_offset < 0) {
        e << "q_offset = " << p.q_offset << " (must be >= 0)";
        return e.str();
    }
    if (p.kv_valid_len)
        for (int32_t b = 0; b < p.batch; ++b)
            if (p.kv_valid_len[b] < 0 || p.kv_valid_len[b] > p.kv_len) {
                e << "kv_valid_len[" << b << "] = " << p.kv_valid_len[b] << " (must be in [0, "
                  << p.kv_len << "])";
                return e.str();
            }
    return {};
}

}  // namespace attncheck
