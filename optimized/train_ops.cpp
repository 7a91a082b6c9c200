// optimized/train_ops.cpp — the training step's matrix products, LayerNorm and activations
// (train_ops.hpp). The products are gemm.hpp's linear(); the rest is row- or column-parallel
// OpenMP with double sums, each in one thread and a fixed order.
#include "optimized/train_ops.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace attncheck::optimized::train_detail {

namespace {

// Below this many elements a loop runs serially: a parallel region costs a few microseconds.
constexpr std::size_t kParallelMin = 1u << 14;

// Columns per task of the column sums: 32 floats are two cache lines of a row, and a task walks
// every row of its columns, in order.
constexpr int kSumColumns = 32;

}  // namespace

void transpose(const float* a, int rows, int cols, int lda, float* out) {
    constexpr int kB = 32;  // a 32 x 32 block: 4 KiB read and 4 KiB written, both in L1
    const int rb = (rows + kB - 1) / kB, cb = (cols + kB - 1) / kB;
#pragma omp parallel for schedule(static) collapse(2) if (std::size_t(rows) * std::size_t(cols) >= kParallelMin)
    for (int bi = 0; bi < rb; ++bi)
        for (int bj = 0; bj < cb; ++bj) {
            const int i1 = std::min(rows, (bi + 1) * kB), j1 = std::min(cols, (bj + 1) * kB);
            for (int j = bj * kB; j < j1; ++j)
                for (int i = bi * kB; i < i1; ++i)
                    out[std::size_t(j) * std::size_t(rows) + std::size_t(i)] = a[std::size_t(i) * std::size_t(lda) + std::size_t(j)];
        }
}

void backward_dx(const float* W, int out, int in, const float* dY, int M, float* dX, bool accumulate, PackedMatrix& pack) {
    // linear() computes x Wp^T with Wp [in, out] = W^T: its transpose is W itself.
    pack_weights_transposed(W, in, out, in, pack);
    linear(pack, dY, M, out, dX, in, Activation32::none, accumulate ? dX : nullptr, in);
}

void backward_dw(const float* dY, const float* X, int M, int out, int in, float* dW, float* db, Scratch& dYt_buf,
                 PackedMatrix& pack) {
    float* dYt = dYt_buf.get(std::size_t(out) * std::size_t(M));  // [out, M]
    transpose(dY, M, out, out, dYt);
    if (db) {
#pragma omp parallel for schedule(static) if (std::size_t(out) * std::size_t(M) >= kParallelMin)
        for (int o = 0; o < out; ++o) {
            const float* row = dYt + std::size_t(o) * std::size_t(M);
            double s = 0;
            for (int r = 0; r < M; ++r) s += row[r];
            db[o] = float(s);
        }
    }
    // dW = dY^T X: rows of dY^T against the "weights" X^T [in, M], whose transpose X is at hand.
    pack_weights_transposed(X, in, M, in, pack);
    linear(pack, dYt, out, M, dW, in);
}

void norm_forward(const float* x, int M, int d, const float* w, const float* b, double eps, float* y, const NormRows& cache) {
#pragma omp parallel for schedule(static) if (std::size_t(M) * std::size_t(d) >= kParallelMin)
    for (int r = 0; r < M; ++r) {
        const float* xr = x + std::size_t(r) * std::size_t(d);
        float* yr = y + std::size_t(r) * std::size_t(d);
        float* xh = cache.xhat + std::size_t(r) * std::size_t(d);
        double mean = 0;
        for (int c = 0; c < d; ++c) mean += xr[c];
        mean /= d;
        double var = 0;
        for (int c = 0; c < d; ++c) var += (xr[c] - mean) * (xr[c] - mean);
        var /= d;
        const double rstd = 1.0 / std::sqrt(var + eps);
        cache.rstd[std::size_t(r)] = float(rstd);
        for (int c = 0; c < d; ++c) {
            const double h = (xr[c] - mean) * rstd;
            xh[c] = float(h);
            yr[c] = float(h * w[c] + b[c]);
        }
    }
}

void norm_backward(const float* dy, const NormRows& cache, const float* w, int M, int d, float* dx, float* dw, float* db,
                   bool drop_mean) {
    const bool parallel = std::size_t(M) * std::size_t(d) >= kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
    for (int r = 0; r < M; ++r) {
        const float* g = dy + std::size_t(r) * std::size_t(d);
        const float* xh = cache.xhat + std::size_t(r) * std::size_t(d);
        double mean_g = 0, mean_gx = 0;
        for (int c = 0; c < d; ++c) {
            const double gw = double(g[c]) * w[c];
            mean_g += gw;
            mean_gx += gw * xh[c];
        }
        mean_g = drop_mean ? 0.0 : mean_g / d;
        mean_gx /= d;
        const double rstd = cache.rstd[std::size_t(r)];
        float* out = dx + std::size_t(r) * std::size_t(d);
        for (int c = 0; c < d; ++c) out[c] = float(rstd * (double(g[c]) * w[c] - mean_g - xh[c] * mean_gx));
    }
    const int blocks = (d + kSumColumns - 1) / kSumColumns;
#pragma omp parallel for schedule(static) if (parallel)
    for (int bc = 0; bc < blocks; ++bc) {
        const int c0 = bc * kSumColumns, c1 = std::min(d, c0 + kSumColumns);
        double sw[kSumColumns] = {}, sb[kSumColumns] = {};
        for (int r = 0; r < M; ++r) {
            const float* g = dy + std::size_t(r) * std::size_t(d);
            const float* xh = cache.xhat + std::size_t(r) * std::size_t(d);
            for (int c = c0; c < c1; ++c) {
                sw[c - c0] += double(g[c]) * xh[c];
                sb[c - c0] += g[c];
            }
        }
        for (int c = c0; c < c1; ++c) {
            dw[c] = float(sw[c - c0]);
            db[c] = float(sb[c - c0]);
        }
    }
}

void activation_forward(Activation32 a, const float* pre, float* post, std::size_t n) {
    const std::ptrdiff_t N = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < N; ++i) post[i] = activate32(a, pre[i]);
}

void activation_backward(Activation32 a, const float* pre, float* g, std::size_t n) {
    const std::ptrdiff_t N = std::ptrdiff_t(n);
    const float inv_sqrt2 = float(std::numbers::sqrt2 / 2), inv_sqrt_2pi = float(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    const float k = float(std::sqrt(2.0 / std::numbers::pi)), c3 = 0.044715f;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < N; ++i) {
        const float x = pre[i];
        float da = 1.0f;
        switch (a) {
            case Activation32::none: break;
            case Activation32::relu: da = x > 0.0f ? 1.0f : 0.0f; break;
            case Activation32::gelu:  // Phi(x) + x phi(x)
                da = 0.5f * (1.0f + std::erf(x * inv_sqrt2)) + x * std::exp(-0.5f * x * x) * inv_sqrt_2pi;
                break;
            case Activation32::gelu_tanh: {
                const float t = std::tanh(k * (x + c3 * x * x * x));
                da = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c3 * x * x);
                break;
            }
        }
        g[i] *= da;
    }
}

void add_into(float* dst, const float* src, std::size_t n) {
    const std::ptrdiff_t N = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < N; ++i) dst[i] += src[i];
}

}  // namespace attncheck::optimized::train_detail
