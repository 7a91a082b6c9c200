// properties/gradients.hpp — how the gradient properties call a kernel's backward pass
// (attncheck_grads_v2, kernel_abi_v2.h) and read what it wrote; shared by the files of the
// properties, not part of the installed API.
//
// A backward call is a forward case (KernelCase, built by build_case with lse) whose out and lse
// hold a forward's results (the reference kernel's, i.e. the float64 oracle rounded, or the
// kernel's own), plus dout laid out as out, and dq, dk, dv laid out as q, k, v between guards:
// the elements the ABI says are written are prefilled with a "never written" NaN, the rest
// (guards, gaps between rows) with a canary. The results are read back in the gradient oracle's
// logical order (reference/attention_grad.hpp): dq rows (b, h, i) as the forward's rows, dk and
// dv rows (b, hk, j) for every k / v row of the call (kv_rows_of).
#pragma once

#include <string>
#include <vector>

#include "properties/kernel_case.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/verdict.hpp"
#include "reference/attention_grad.hpp"

namespace attncheck::properties {

// Where the call's out and lse come from.
enum class ForwardFrom { reference, kernel };

struct GradOptions {
    ForwardFrom forward = ForwardFrom::reference;
    BuildOptions build = {};     // guard pages around q, k, v
    bool zero_outputs = false;   // dq, dk, dv prefilled with zeros instead of the "never written" NaN
    bool oracle = true;          // compute the gradient oracle (before the call, on the call's own out and lse)
};

struct GradCall {
    int rc = 0;             // the backward's return (or the kernel's forward's, when it refused)
    bool forward_refused = false;
    Built built;            // the forward problem: q, k, v, out and lse as the backward read them
    reference::GradOracle oracle;
    std::vector<float> dq, dk, dv;  // logical order (GradOracle's)
    std::vector<float> dsinks;      // [Hq] with sinks, empty without
    // "" or the first element written outside dq, dk, dv, left unwritten in them, or the first
    // input (q, k, v, out, lse, dout) the call changed.
    std::string side_effect;
};

// dout for the case, logical [rows, Dv] in the forward's row order: N(0, 1) rounded to the
// dtype, deterministic in the case's data seed.
std::vector<float> dout_of(const KernelCase& c);

// The backward of `kernel` on case c (c.want_lse is forced: the backward reads lse).
GradCall call_backward(const KernelUnderTest& kernel, const KernelCase& c, const KernelInputs& in,
                       const std::vector<float>& dout, const GradOptions& options = {});

// The gradient properties (`.backward = true`), the end of kernel_properties()'s table.
const std::vector<KernelProperty>& gradient_properties();

}  // namespace attncheck::properties
