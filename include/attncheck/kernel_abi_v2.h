/* attncheck/kernel_abi_v2.h — version 2 of the C interface an attention kernel plugs into.
 *
 * Version 1 (attncheck/kernel_abi.h) stays as it is: a v1 kernel keeps loading and passing.
 * Version 2 (docs/spec/KERNEL_ABI.md, "Version 2") lets today's kernels be checked as they are:
 * grouped-query heads, float16/bfloat16, any strides ([B,T,H,D], [B,H,T,D], views with gaps),
 * per-sequence positions, packed variable-length batches, sliding windows, softcapping, ALiBi,
 * a paged KV cache and a log-sum-exp output. docs/kernel-abi.md pins this layout as a table.
 *
 * A v2 kernel is one function that takes the whole problem, pointers included:
 *     int my_kernel(const attncheck_problem_v2* p);
 * and a library says it is version 2 by exporting `<symbol>_abi_version` (or the library-wide
 * `attncheck_abi_version`) = 2. It returns ATTNCHECK_OK (0), or nonzero for a problem it does
 * not support, as a whole: a decode-only kernel refuses a varlen batch in which any sequence
 * has more than one query row. It must not write outside out and lse, change its inputs, or
 * read outside them. Memory no row reads (padding past a sequence's keys, gaps between rows,
 * unused blocks) may hold NaN or Inf, as uninitialised memory does.
 *
 * Room to grow: struct_size is sizeof(attncheck_problem_v2) as the caller built it, so later
 * minor versions append fields after the last one here, and a kernel built against this
 * header reads only what it knows.
 *
 * The backward pass (a minor addition, at the end of this header) is a second entry point
 * taking this same problem, with out and lse as the forward wrote them, and the gradient
 * tensors (attncheck_grads_v2).
 *
 * Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, Tq / Tk = query rows / keys of a
 * sequence, Dk = head_dim, Dv = value_dim.
 */
#ifndef ATTNCHECK_KERNEL_ABI_V2_H
#define ATTNCHECK_KERNEL_ABI_V2_H

#include <stdint.h>

#include "attncheck/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNCHECK_ABI_VERSION_2 2

/* Element types of q, k, v and out (one per call). lse is always float32. float16 is IEEE
 * binary16, bfloat16 the upper half of a binary32; both are stored as uint16_t bit patterns. */
#define ATTNCHECK_DTYPE_F32 0
#define ATTNCHECK_DTYPE_F16 1
#define ATTNCHECK_DTYPE_BF16 2

/* A strided view: element (b, h, t, c) is at data + b*stride[0] + h*stride[1] + t*stride[2]
 * + c*stride[3], strides in elements (not bytes), any sign-free values (gaps allowed, no
 * overlap of elements the kernel writes). What b and t mean depends on the tensor:
 *   dense:   b = sequence, t = row within the sequence
 *   varlen:  b unused (stride[0] ignored), t = cu_seqlens[b] + row (packed rows)
 *   paged:   k and v only: b = block, t = row within the block */
typedef struct attncheck_tensor_v2 {
    void* data;         /* q, k, v: read only (const in meaning) */
    int64_t stride[4];  /* batch-or-block, head, row, column */
} attncheck_tensor_v2;

typedef struct attncheck_problem_v2 {
    int32_t abi_version;  /* ATTNCHECK_ABI_VERSION_2 */
    int32_t struct_size;  /* sizeof(attncheck_problem_v2) of the caller */
    int32_t dtype;        /* ATTNCHECK_DTYPE_*: of q, k, v and out */
    int32_t batch;        /* B: sequences in the call */
    int32_t q_heads;      /* Hq */
    int32_t kv_heads;     /* Hk, dividing Hq: query head h reads kv head h / (Hq / Hk) */
    int32_t head_dim;     /* Dk */
    int32_t value_dim;    /* Dv */

    /* Lengths. Dense: every sequence has q_len rows and, in k/v, kv_len rows of which the
     * first kv_lens[b] (all when kv_lens is null) are its keys; the rest is padding. Varlen:
     * cu_seqlens_q (B+1 prefix sums, [0] = 0) packs the q/out/lse rows, and cu_seqlens_k packs
     * the k/v rows (then kv_lens must be null); q_len and kv_len are then the largest
     * per-sequence counts. Paged: k/v rows come from blocks, sequence b has kv_lens[b] keys
     * (kv_len when null), and cu_seqlens_k must be null. */
    int32_t q_len;
    int32_t kv_len;
    const int32_t* kv_lens;       /* null, or B key counts */
    const int32_t* cu_seqlens_q;  /* null, or B+1 */
    const int32_t* cu_seqlens_k;  /* null, or B+1 */

    /* Positions: q_pos[b] (B values, never null) is the absolute position of sequence b's
     * query row 0 among its keys; row i is at a = q_pos[b] + i. A prefill has q_pos = 0 and
     * Tq = Tk, a decode step q_pos = Tk - 1 and Tq = 1. */
    const int32_t* q_pos;

    /* Visibility of key j to the row at absolute position a, in sequence b: j < Tk(b), and
     *   causal:           j <= a
     *   window_left >= 0: j >= a - window_left      (-1: no left limit)
     *   window_right >= 0 (non-causal only): j <= a + window_right  (-1: no right limit)
     * A causal problem has window_right = -1 (the mask is its right limit); one with both set
     * is malformed and should be refused.
     * A window of w keys to the left means exactly w + 1 keys with the diagonal. */
    int32_t causal;
    int32_t window_left;
    int32_t window_right;

    /* The score of (row at a, key j) of query head h:
     *   s = scale * q.k;  if softcap > 0: s = softcap * tanh(s / softcap);
     *   if alibi_slopes: s -= alibi_slopes[h] * (a - j);
     * then softmax over the visible keys. A row with no visible key gives zeros in out and
     * -inf in lse. */
    float scale;
    float softcap;               /* 0: none */
    const float* alibi_slopes;   /* null, or Hq slopes */

    /* Paged KV cache: null block_table means k/v are dense or varlen. Otherwise k and v are
     * [num_blocks, block_size, Hk, D]-shaped views (any strides) and key j of sequence b is
     * row j % block_size of block block_table[b * block_table_stride + j / block_size]; only
     * the first ceil(Tk(b) / block_size) entries of a sequence's row are read. */
    const int32_t* block_table;
    int32_t block_table_stride;  /* entries per sequence in block_table */
    int32_t block_size;
    int32_t num_blocks;

    attncheck_tensor_v2 q;    /* (b, Hq, row, Dk) */
    attncheck_tensor_v2 k;    /* (b or block, Hk, row, Dk) */
    attncheck_tensor_v2 v;    /* (b or block, Hk, row, Dv) */
    attncheck_tensor_v2 out;  /* (b, Hq, row, Dv): written */

    /* Optional log-sum-exp out, float32: null, or lse + b*lse_stride[0] + h*lse_stride[1] +
     * t*lse_stride[2] gets log(sum_j exp(s_j)) of that row, natural log, over the visible keys
     * with the scores s_j as defined above (so the row's softmax is exp(s_j - lse)). t is the
     * row as in q (varlen: cu_seqlens_q[b] + row, stride[0] ignored). */
    float* lse;
    int64_t lse_stride[3];

    /* Attention sinks (a minor addition): null, or Hq float32 logits, one per query head, as
     * gpt-oss and StreamingLLM learn them. Sink h joins the softmax of every row of query head h
     * as one more score that carries no value:
     *   p_j = exp(s_j) / (exp(sinks[h]) + sum_l exp(s_l)),  out = sum_j p_j v_j,
     *   lse = log(exp(sinks[h]) + sum_j exp(s_j)),
     * so a row's probabilities sum to less than 1, and a row with no visible key gives out 0 and
     * lse = sinks[h]. A kernel built against a header without this field never reads it: the
     * suite poses sinks only to a kernel that declares sinks=yes. */
    const float* sinks;
} attncheck_problem_v2;

typedef int (*attncheck_kernel_v2_fn)(const attncheck_problem_v2* p);

/* The backward pass: the gradients of a scalar loss L with respect to q, k and v, given
 * dout = dL/dout, for the forward problem p:
 *     int my_kernel_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g);
 * exported by a library as `<symbol>_backward` beside the forward `<symbol>`.
 *
 * p is the forward's problem as the forward was called, with out and lse holding what the
 * forward wrote: both are inputs here (read only), and lse is never null (float32, its rows'
 * probabilities are exp(s_j - lse)). A backward call never has a block_table (a paged cache is
 * an inference layout; a kernel refuses one). With P the forward's probabilities (zero for a
 * key a row does not see), for each row and the keys it sees:
 *     dv_j  = sum over rows of P_ij dout_i           dP_ij = dout_i . v_j
 *     D_i   = dout_i . out_i  (= sum_j P_ij dP_ij)   dS_ij = P_ij (dP_ij - D_i)
 *     with softcap: dS_ij *= 1 - tanh(scale q_i.k_j / softcap)^2   (ALiBi adds a constant)
 *     dq_i  = scale sum_j dS_ij k_j                  dk_j  = scale sum_i dS_ij q_i
 * dk and dv of kv head hk are summed over the query heads of its group (GQA). With sinks, P is
 * exp(s_j - lse) with the sink in lse, and dsinks (below) gets the sinks' gradient.
 *
 * Every element of dq, dk and dv is written: dq for every query row (0 for a row that sees no
 * key), dk and dv for every k / v row of the dense tensors (kv_len rows per sequence: rows past
 * kv_lens[b], and keys no row sees, get 0) or every packed row (varlen). Elements are of
 * p->dtype. The kernel must not write anything else, change its inputs (q, k, v, out, lse,
 * dout), or read outside them; memory no row reads may hold NaN or Inf, as in the forward.
 * Returns ATTNCHECK_OK, or nonzero for a problem it does not support, as a whole. */
typedef struct attncheck_grads_v2 {
    int32_t struct_size;       /* sizeof(attncheck_grads_v2) of the caller */
    int32_t reserved;          /* 0 */
    attncheck_tensor_v2 dout;  /* (b, Hq, row, Dv): read, indexed as out */
    attncheck_tensor_v2 dq;    /* (b, Hq, row, Dk): written, indexed as q */
    attncheck_tensor_v2 dk;    /* (b, Hk, row, Dk): written, indexed as k (dense or varlen) */
    attncheck_tensor_v2 dv;    /* (b, Hk, row, Dv): written, indexed as v */
    /* With sinks (p->sinks not null): Hq float32, written: dL/dsinks[h] = -sum over the rows of
     * query head h (every sequence of the call) of exp(sinks[h] - lse_i) D_i. Null otherwise. */
    float* dsinks;
} attncheck_grads_v2;

typedef int (*attncheck_kernel_v2_backward_fn)(const attncheck_problem_v2* p, const attncheck_grads_v2* g);

#ifdef __cplusplus
}
#endif

#endif /* ATTNCHECK_KERNEL_ABI_V2_H */
