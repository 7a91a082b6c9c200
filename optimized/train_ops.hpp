// optimized/train_ops.hpp — the pieces of the float32 training step (train_step.cpp) that are
// not its wiring: the backward's matrix products on linear(), LayerNorm with the statistics its
// backward needs, the activations' derivatives, and transposes. Internal to optimized/.
//
// Determinism: every output element is reduced by one thread in a fixed order (rows ascending,
// or linear()'s k ascending), so every result here is bitwise the same for any thread count.
//
// Dimension legend: M = rows (the tokens of a batch), d = features of a LayerNorm,
// out / in = the out and in features of a linear layer W [out, in].
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "optimized/gemm.hpp"

namespace attncheck::optimized::train_detail {

// Storage for n floats, not initialised, grown when a call needs more and otherwise kept: a
// training step writes its buffers whole before it reads them, and fresh buffers every step
// would cost it page faults and zeroing (a quarter of a step of the bench's model, measured).
struct Scratch {
    std::unique_ptr<float[]> data;
    std::size_t capacity = 0;
    float* get(std::size_t n) {
        if (n > capacity) {
            data.reset();  // free first: the peak is the new size, not both
            data = std::make_unique_for_overwrite<float[]>(n);
            capacity = n;
        }
        return data.get();
    }
};

// out [cols, rows] = a [rows, cols]^T, a with row stride lda >= cols. Blocked, OpenMP.
void transpose(const float* a, int rows, int cols, int lda, float* out);

// dX [M, in] = dY [M, out] W [out, in]  (W row-major, as the model stores it), or dX += that
// when accumulate. A linear() over W^T, packed straight from W (pack_weights_transposed) into
// pack.
void backward_dx(const float* W, int out, int in, const float* dY, int M, float* dX, bool accumulate, PackedMatrix& pack);

// dW [out, in] = dY [M, out]^T X [M, in], and db [out] = the column sums of dY (db may be null).
// A linear() with X^T as its weights (packed straight from X) over the rows of dY^T: each dW
// element is one thread's sum over the M rows in order. dYt holds dY^T [out, M], pack X^T.
void backward_dw(const float* dY, const float* X, int M, int out, int in, float* dW, float* db, Scratch& dYt,
                 PackedMatrix& pack);

// What LayerNorm's backward needs of its forward.
struct NormRows {
    float* xhat;  // [M, d]: (x - mean) / sqrt(var + eps)
    float* rstd;  // [M]:    1 / sqrt(var + eps)
};

// y = xhat * w + b per row of x [M, d] (MODEL.md §layer, biased variance), statistics in double;
// y may alias x. Fills cache.
void norm_forward(const float* x, int M, int d, const float* w, const float* b, double eps, float* y, const NormRows& cache);

// Given dy [M, d]: dx [M, d] = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w (row
// sums in double; drop_mean plants GradBug::layer_norm_mean_dropped), dw [d] and db [d] set to
// the column sums of dy * xhat and dy.
void norm_backward(const float* dy, const NormRows& cache, const float* w, int M, int d, float* dx, float* dw, float* db,
                   bool drop_mean);

// post[i] = act(pre[i]) for i < n (activate32, the decoder's float activation).
void activation_forward(Activation32 a, const float* pre, float* post, std::size_t n);
// g[i] *= act'(pre[i]) for i < n.
void activation_backward(Activation32 a, const float* pre, float* g, std::size_t n);

// dst[i] += src[i] for i < n.
void add_into(float* dst, const float* src, std::size_t n);

}  // namespace attncheck::optimized::train_detail
