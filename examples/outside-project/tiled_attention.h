/* tiled_attention.h — an example kernel author's attention kernel (the thing being checked).
 *
 * Follows attncheck/kernel_abi.h: a plain C signature, so the same function could be put in a
 * shared library and checked with `attncheck fuzz --kernel-lib`. */
#ifndef TILED_ATTENTION_H
#define TILED_ATTENTION_H

#include <attncheck/kernel_abi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Masked attention with an online softmax over tiles of kTileKeys keys (FlashAttention's
 * recurrence, on the CPU): never forms the [Tq, Tk] probability matrix. */
int tiled_attention(const attncheck_problem* p, const float* q, const float* k, const float* v,
                    float* out);

#ifdef __cplusplus
}
#endif

#endif
