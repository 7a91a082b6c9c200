/* attncheck/kernel_abi.h — the C interface an attention kernel plugs into.
 *
 * This header is the ABI of docs/spec/KERNEL_ABI.md (installed as share/doc/attncheck/KERNEL_ABI.md): the names, order and types of the
 * fields of attncheck_problem and the signature of attncheck_kernel_fn are fixed. It is plain C
 * (C99 and C++), so a kernel written in C, C++, Rust or a GPU host wrapper can be compiled into
 * a shared library and checked without rebuilding the suite.
 *
 * Dimension legend (used in every shape comment of the project):
 *   B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
 */
#ifndef ATTNCHECK_KERNEL_ABI_H
#define ATTNCHECK_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. A kernel refuses (returns nonzero for) a version it
 * does not know. */
#define ATTNCHECK_ABI_VERSION 1

/* Return codes. Any nonzero return means "this problem is not supported by this kernel": the
 * suite reports such a case as unsupported, never as a failure. */
#define ATTNCHECK_OK 0
#define ATTNCHECK_UNSUPPORTED 1

typedef struct attncheck_problem {
    int32_t abi_version;          /* ATTNCHECK_ABI_VERSION */
    int32_t batch;                /* B: sequences in the call */
    int32_t heads;                /* H: attention heads */
    int32_t q_len;                /* Tq: query rows per sequence and head */
    int32_t kv_len;               /* Tk: key/value rows per sequence and head */
    int32_t head_dim;             /* Dk: width of a query and of a key */
    int32_t value_dim;            /* Dv: width of a value and of an output row */
    int32_t q_offset;             /* absolute position of query row 0 in the key sequence */
    int32_t causal;               /* nonzero: key j visible to query row i only if j <= q_offset + i */
    const int32_t* kv_valid_len;  /* null, or B counts: keys j >= kv_valid_len[b] are padding */
    float scale;                  /* multiplies q.k before masking, usually 1/sqrt(Dk) */
} attncheck_problem;

/* out[b,h,i,:] = sum_j softmax_j(scale * q[b,h,i,:].k[b,h,j,:] + mask[i][j]) * v[b,h,j,:]
 * with mask 0 where visible and -inf where not; a row with no visible key gives zeros.
 *
 *   q   [B, H, Tq, Dk]   k [B, H, Tk, Dk]   v [B, H, Tk, Dv]   out [B, H, Tq, Dv]
 *
 * All contiguous, row-major float32. Must not write outside out, must not change its inputs.
 * Returns ATTNCHECK_OK, or nonzero for an unsupported problem. */
typedef int (*attncheck_kernel_fn)(const attncheck_problem* p, const float* q, const float* k,
                                   const float* v, float* out);

#ifdef __cplusplus
}
#endif

#endif /* ATTNCHECK_KERNEL_ABI_H */
