// optimized/train_step.hpp — the float32 training step of the optimized decoder: the loss of
// teacher-forced next-token prediction over a batch and its gradient with respect to every
// parameter, with the attention's forward and backward done by a version 2 kernel (the kernel
// under test, kernel_abi_v2.h: forward with lse, then `<symbol>_backward`), OpenMP over the
// matrix products and the batch. The oracle is reference/decoder_grad.hpp (float64): same loss,
// same parameter names, same mask parameter.
//
// Dimension legend: V = vocab, d = d_model, h = heads, dk = d/h, f = d_ff, L = layers,
// T = tokens of a sequence, B = sequences in a batch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "attncheck/kernel_abi_v2.h"
#include "attncheck/kernels.hpp"
#include "attncheck/model.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::optimized {

// The attention of a training step: a version 2 forward (called with lse) and its backward.
struct TrainKernel {
    attncheck_kernel_v2_fn forward = attncheck_optimized_kernel_v2;
    attncheck_kernel_v2_backward_fn backward = attncheck_optimized_kernel_v2_backward;
};

// Gradients by the model's tensor names (lm_head.weight absent when tied), each row-major with
// the tensor's shape, float32.
using Grads = std::map<std::string, std::vector<float>>;

struct StepOptions {
    reference::TrainMask mask = reference::TrainMask::causal;
    // A bug planted in the step's own backward (not the kernel's): one of step_grad_bugs().
    // Those of the attention (softmax_rowsum_dropped, mask_ignored_in_backward) live in the
    // kernel's backward, planted by a backward zoo kernel instead: InputError here.
    reference::GradBug bug = reference::GradBug::none;
};

// The bugs StepOptions::bug can plant (every GradBug of the decoder outside the attention).
std::vector<reference::GradBug> step_grad_bugs();

// The batch's loss (reference::decoder_loss's definition); when grad is given, sets it to the
// gradient of the loss with respect to every parameter. Throws InputError for what
// reference::decoder_loss refuses (a bad batch, a config check_trainable refuses) and
// KernelError when the kernel's forward or backward returns nonzero. Deterministic for a given
// thread count when the kernel is. A step of under 1e8 train_flops runs on one thread (its
// parallel regions would cost more than they save; train_step.cpp). The activations and scratch
// are kept per calling thread from call to call (grown, never shrunk: ~17 MB per layer at 1024
// rows of d = 256, f = 1024), and grad's vectors are reused when it holds this model's names.
double train_loss(const Model& model, const std::vector<reference::Sequence>& batch, const TrainKernel& kernel = {},
                  const StepOptions& o = {}, Grads* grad = nullptr);

// The step's floating-point work (2 x multiply-adds) for this batch, counted from the shapes:
// forward and backward, attention over the visible pairs only. The throughput of a step is
// this over its time.
double train_flops(const ModelConfig& c, const std::vector<reference::Sequence>& batch,
                   reference::TrainMask mask = reference::TrainMask::causal);

}  // namespace attncheck::optimized
