// perf/kernel_shapes.hpp — the standard problems the attention kernel is timed on, and what a
// call on each must do: its useful flops and the K/V bytes it must read.
//
// Shared by the benchmark binary (bench/kernel_bench.cpp) and `attncheck bench` (cli/), so that
// both count work the same way:
//   useful_flops  only unmasked work counts, (2*Dk + 2*Dv) flops per visible (query, key) pair:
//                 the work a kernel that skips nothing visible must do
//   kv_bytes      the K and V rows visible to some query, read once
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "attncheck/kernel_abi.h"

namespace attncheck::perf {

// B = 1, H = 8, Dk = Dv = 64, scale 1/8, causal: one layer of a small decoder.
inline constexpr int kShapeHeads = 8, kShapeHeadDim = 64;
// A decode step reads K and V from copies of the cache in turn (67 MB in float32), together
// larger than the L3 of most machines (32 MiB on a Zen 3 CCX), so the step streams from DRAM as a
// real decoder's does (one layer's cache is evicted by the others). A 300 MiB L3 (Emerald Rapids)
// holds them all: there the step outruns DRAM, and the figure to read is frac_read, against
// perf::read_gbs of the same bytes (bench/kernel_bench.cpp; `attncheck bench`'s "of read", the
// bound of its verdict).
inline constexpr int kDecodeCopies = 4;

// spread-512's factor on q: scores (scale 1/8, uniform inputs) get a standard deviation of
// about 30 instead of 0.33, so that most weights exp(s - m) fall below 2^-126. A kernel whose
// exp returns subnormals there takes a microcode assist per instruction on Intel cores: this
// project's kernel ran 11-14x slower on that shape than on prefill-512 until its exp flushed
// them (Emerald Rapids), a cliff that the ordinary shapes never reach.
inline constexpr float kSpreadQScale = 90.0f;

struct KernelShape {
    std::string name;  // "prefill-512", "decode-4096", "chunk-64@1024", ...
    int q_len = 0, kv_len = 0, q_offset = 0;
    int copies = 1;       // copies of K and V the calls rotate over (kDecodeCopies for decode)
    bool decode = false;  // bound by the K/V bytes it reads rather than by its flops
    float q_scale = 1.0f;  // q's inputs are uniform in [-q_scale, q_scale)
};

// prefill-512 and prefill-2048 (Tq = Tk = T, q_offset 0), decode-4096 (Tq 1 at q_offset 4095,
// K/V rotated over kDecodeCopies copies), chunk-64@1024 (Tq 64 at q_offset 1024, Tk 1088),
// spread-512 (prefill-512 with q scaled by kSpreadQScale: the same work, widely spread scores).
const std::vector<KernelShape>& standard_shapes();
// The standard shape of that name; nullptr when there is none.
const KernelShape* find_shape(const std::string& name);

struct KernelProblem {
    attncheck_problem p{};
    // [B,H,Tq,Dk] [copies*B,H,Tk,Dk] [copies*B,H,Tk,Dv] [B,H,Tq,Dv]
    std::vector<float> q, k, v, out;
    int copies = 1;
    double useful_flops = 0;
    double kv_bytes = 0;
    const float* k_copy(int c) const { return k.data() + std::size_t(c) * (k.size() / std::size_t(copies)); }
    const float* v_copy(int c) const { return v.data() + std::size_t(c) * (v.size() / std::size_t(copies)); }
};

// The problem: inputs uniform in [-1, 1) from a fixed seed (q's then multiplied by q_scale),
// out sized, work counted.
KernelProblem make_kernel_problem(int q_len, int kv_len, int q_offset, int copies, float q_scale = 1.0f);
KernelProblem make_kernel_problem(const KernelShape& shape);

}  // namespace attncheck::perf
