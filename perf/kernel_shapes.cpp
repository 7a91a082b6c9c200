// perf/kernel_shapes.cpp — the standard timing problems of the attention kernel and their work.
#include "perf/kernel_shapes.hpp"

#include <algorithm>
#include <random>

namespace attncheck::perf {

const std::vector<KernelShape>& standard_shapes() {
    static const std::vector<KernelShape> shapes = {
        {"prefill-512", 512, 512, 0, 1, false},
        {"prefill-2048", 2048, 2048, 0, 1, false},
        {"decode-4096", 1, 4096, 4095, kDecodeCopies, true},
        {"chunk-64@1024", 64, 1088, 1024, 1, false},
        {"spread-512", 512, 512, 0, 1, false, kSpreadQScale},
    };
    return shapes;
}

const KernelShape* find_shape(const std::string& name) {
    for (const KernelShape& s : standard_shapes())
        if (s.name == name) return &s;
    return nullptr;
}

KernelProblem make_kernel_problem(int Tq, int Tk, int q_offset, int copies, float q_scale) {
    KernelProblem pr;
    pr.copies = copies;
    attncheck_problem& p = pr.p;
    p.abi_version = ATTNCHECK_ABI_VERSION;
    p.batch = 1, p.heads = kShapeHeads, p.q_len = Tq, p.kv_len = Tk;
    p.head_dim = kShapeHeadDim, p.value_dim = kShapeHeadDim, p.q_offset = q_offset, p.causal = 1;
    p.kv_valid_len = nullptr;
    p.scale = 0.125f;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const std::size_t H = kShapeHeads, D = kShapeHeadDim;
    pr.q.resize(H * std::size_t(Tq) * D);
    pr.k.resize(std::size_t(copies) * H * std::size_t(Tk) * D);
    pr.v.resize(pr.k.size());
    for (auto* x : {&pr.q, &pr.k, &pr.v})
        for (auto& e : *x) e = u(rng);
    for (auto& e : pr.q) e *= q_scale;
    pr.out.resize(H * std::size_t(Tq) * D);
    double pairs = 0, max_key = 0;
    for (int i = 0; i < Tq; ++i) {
        const double visible = std::min<double>(q_offset + i + 1, Tk);
        pairs += visible;
        max_key = std::max(max_key, visible);
    }
    pr.useful_flops = double(H) * pairs * (2.0 * kShapeHeadDim + 2.0 * kShapeHeadDim);
    pr.kv_bytes = double(H) * max_key * (kShapeHeadDim + kShapeHeadDim) * sizeof(float);
    return pr;
}

KernelProblem make_kernel_problem(const KernelShape& s) {
    return make_kernel_problem(s.q_len, s.kv_len, s.q_offset, s.copies, s.q_scale);
}

}  // namespace attncheck::perf
