// optimized/layers.cpp — LayerNorm of the optimized decoder's layer stack (layers.hpp).
#include "optimized/layers.hpp"

#include <cmath>

namespace attncheck::optimized {

namespace {

// Statistics in double, more accurate than the float baseline, so they never eat into the
// tolerance. The sums run in kStatLanes interleaved partial sums (column c goes to lane
// c % kStatLanes, lanes added in order, then the columns past the last full group): one
// vector of doubles instead of a serial chain of d dependent adds, which made LayerNorm ~3% of
// a prefill. The order is fixed, so a row's result does not depend on where it is computed.
constexpr int kStatLanes = 8;

double row_sum(const float* xr, int d, double center, bool squares) {
    double acc[kStatLanes] = {};
    int c = 0;
    for (; c + kStatLanes <= d; c += kStatLanes)
        for (int l = 0; l < kStatLanes; ++l) {
            const double t = double(xr[c + l]) - center;
            acc[l] = squares ? std::fma(t, t, acc[l]) : acc[l] + t;
        }
    double s = 0;
    for (double a : acc) s += a;
    for (; c < d; ++c) {
        const double t = double(xr[c]) - center;
        s = squares ? std::fma(t, t, s) : s + t;
    }
    return s;
}

}  // namespace

void layer_norm(const float* x, int m, int d, const Norm32& n, double eps, float* y) {
#pragma omp parallel for schedule(static) if (m >= 32)
    for (int i = 0; i < m; ++i) {
        const float* xr = x + std::size_t(i) * std::size_t(d);
        float* yr = y + std::size_t(i) * std::size_t(d);
        const double mean = row_sum(xr, d, 0.0, false) / d;
        const double var = row_sum(xr, d, mean, true) / d;
        const double inv_std = 1.0 / std::sqrt(var + eps);
        for (int c = 0; c < d; ++c)
            yr[c] = float((xr[c] - mean) * inv_std * n.weight[std::size_t(c)] + n.bias[std::size_t(c)]);
    }
}

}  // namespace attncheck::optimized
