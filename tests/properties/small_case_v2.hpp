// tests/properties/small_case_v2.hpp — the small hand-made version 2 case that tests of the case
// builder and of declarations start from: two sequences, GQA (Hq = 4 query heads on Hk = 2 kv
// heads), [B,H,T,D], no window, softcap or ALiBi. Each test sets the lengths and what it tests.
#pragma once

#include <cstdint>

#include "properties/kernel_case.hpp"

namespace attncheck::properties::test {

inline KernelCase small_gqa_case(std::int32_t dtype, int head_dim, int value_dim, std::uint32_t data_seed) {
    KernelCase c;
    c.dtype = dtype;
    c.batch = 2, c.q_heads = 4, c.kv_heads = 2, c.head_dim = head_dim, c.value_dim = value_dim;
    c.data_seed = data_seed;
    return c;
}

}  // namespace attncheck::properties::test
