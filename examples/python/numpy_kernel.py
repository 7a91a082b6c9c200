"""A NumPy attention kernel for attncheck's kernel ABI version 2, with planted-bug variants.

`attention(p)` is a correct forward pass and `attention_backward(p, g)` its gradient, written
for clarity rather than speed: every sequence of the batch is handled with whole-array NumPy
operations over all of its heads at once, in float64, and results are rounded to the
problem's dtype only when stored. include/attncheck/kernel_abi_v2.h is the contract; the
problem object `p` and gradient object `g` are the Python views of attncheck_problem_v2 and
attncheck_grads_v2 (4-D tensors with axes (b, head, row, column), any strides).

`MUTANTS` and `BACKWARD_MUTANTS` map a name to a kernel that is the correct one with a single
bug of the kind real attention kernels ship with. The forward and backward passes take a `bug`
argument, and each bug is one `if bug == ...` branch next to the line it breaks, so the
correct path reads straight through.
"""

import functools

import numpy as np

REFUSE = 1  # returned (nonzero) for a problem a kernel does not support


# --- element types ------------------------------------------------------------------------

def to_f32(x, dtype):
    """Stored elements of `dtype` as float32 (bfloat16 arrives as uint16 bit patterns)."""
    if dtype == "bfloat16":
        return (np.asarray(x).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(x).astype(np.float32)


def from_f32(x, dtype):
    """float values rounded to nearest-even into the storage type of `dtype`."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float16)
    bits = np.ascontiguousarray(x).view(np.uint32)
    # Adding 0x7FFF, plus one more when the kept half is odd, carries into the upper half
    # exactly when the discarded half is above the midpoint, or at it with an odd upper half.
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    # A NaN whose payload sits in the low half would round to Inf (or wrap): keep it quiet NaN.
    rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def _load(x, dtype):
    """Stored elements as float64, the precision every computation here runs in."""
    return to_f32(x, dtype).astype(np.float64)


# --- the problem, one sequence at a time ------------------------------------------------------

def _kv_head_of(p, bug=None):
    """kv head read by each query head: consecutive groups of Hq / Hk query heads share one."""
    h = np.arange(p.q_heads)
    if bug == "gqa_modulo":
        return h % p.kv_heads
    return h // (p.q_heads // p.kv_heads)


def _paged_kv(p, b, tk, bug=None):
    """Keys 0..tk-1 of sequence b gathered from the paged cache, as (Hk, tk, D) arrays."""
    n_blocks = -(-tk // p.block_size)
    if bug == "paged_table_row0":
        blocks = p.block_table[0, :n_blocks]
    elif bug == "paged_no_table":
        blocks = np.arange(n_blocks)  # logical block number used as the physical one
    else:
        blocks = p.block_table[b, :n_blocks]

    def gather(t):
        # (n_blocks, Hk, block_size, D) -> (Hk, n_blocks * block_size, D), then drop the tail
        # of the last block, which belongs to no key.
        g = _load(t[blocks], p.dtype).transpose(1, 0, 2, 3)
        hk, nb, bs, d = g.shape
        return g.reshape(hk, nb * bs, d)[:, :tk]

    return gather(p.k), gather(p.v)


def _sequences(p, bug=None):
    """Yield (rows, krows, q, k, v, a) for every sequence of the batch.

    rows indexes the sequence's query rows in q, out, lse, dout and dq; krows its key rows in
    k, v, dk and dv (unused when paged). q is (Hq, Tq, Dk), k (Hk, Tk, Dk) and v (Hk, Tk, Dv),
    all float64, and a holds the absolute position of each query row."""
    for b in range(p.batch):
        if p.layout == "varlen":
            q0, q1 = int(p.cu_seqlens_q[b]), int(p.cu_seqlens_q[b + 1])
            k0, k1 = int(p.cu_seqlens_k[b]), int(p.cu_seqlens_k[b + 1])
            if bug == "varlen_keys_from_row0":
                k0, k1 = 0, k1 - k0
            rows = (0, slice(None), slice(q0, q1))
            krows = (0, slice(None), slice(k0, k1))
        else:
            tk = p.kv_len if p.kv_lens is None else int(p.kv_lens[b])
            if bug == "padding_keys_read":
                tk = p.kv_len
            rows = (b, slice(None), slice(0, p.q_len))
            krows = (b, slice(None), slice(0, tk))
        q = _load(p.q[rows], p.dtype)
        if p.layout == "paged":
            k, v = _paged_kv(p, b, tk, bug)
        else:
            k, v = _load(p.k[krows], p.dtype), _load(p.v[krows], p.dtype)
        first = 0 if bug == "ignore_q_pos" else int(p.q_pos[b])
        yield rows, krows, q, k, v, first + np.arange(q.shape[1])


def _visible(p, a, tk, bug=None):
    """(Tq, Tk) mask: which keys each query row sees (keys past Tk were never loaded)."""
    j = np.arange(tk)[None, :]
    a = a[:, None]
    vis = np.ones((a.shape[0], tk), dtype=bool)
    if p.causal:
        vis &= (j < a) if bug == "causal_off_by_one" else (j <= a)
    if p.window_left >= 0:
        vis &= (j > a - p.window_left) if bug == "window_off_by_one" else (j >= a - p.window_left)
    if p.window_right >= 0 and not p.causal:
        vis &= j <= a + p.window_right
    return vis


def _scores(p, q, k, a, bug=None):
    """Scores (Hq, Tq, Tk) before masking, and the scaled dot products they start from.

    k is already expanded to one kv head per query head."""
    scale = 1.0 / np.sqrt(p.head_dim) if bug == "scale_ignored" else float(p.scale)
    qk = q @ k.transpose(0, 2, 1)
    raw = scale * qk

    def cap(x):
        return p.softcap * np.tanh(x / p.softcap)

    s = raw
    if p.softcap > 0:
        if bug == "softcap_before_scale":
            s = scale * cap(qk)
        elif bug != "softcap_after_alibi":
            s = cap(raw)
    if p.alibi_slopes is not None:
        distance = (a[:, None] - np.arange(k.shape[1])[None, :]).astype(np.float64)
        bias = p.alibi_slopes.astype(np.float64)[:, None, None] * distance
        s = s + bias if bug == "alibi_sign_flipped" else s - bias
    if p.softcap > 0 and bug == "softcap_after_alibi":
        s = cap(s)
    return s, raw


def _softmax_rows(p, s, vis, bug=None):
    """Probabilities (Hq, Tq, Tk) and lse (Hq, Tq) of masked scores s, sinks included.

    The row maximum is subtracted before exp so that no exponent overflows; a row with no
    visible key and no sink has m = -inf, which is replaced by 0 to keep exp(-inf - m) = 0."""
    s = np.where(vis, s, -np.inf)
    sinks = None
    if p.sinks is not None and bug != "sinks_ignored":
        sinks = p.sinks.astype(np.float64)[:, None]  # (Hq, 1), broadcast over rows
    if bug == "no_max_subtraction":
        # Exponentials in float32 straight from the scores: exp(89) is already Inf.
        e = np.exp(s.astype(np.float32)).astype(np.float64)
        denom = e.sum(axis=-1) + (np.exp(sinks.astype(np.float32)) if sinks is not None else 0)
        return e / denom[..., None], np.log(denom)
    m = s.max(axis=-1, initial=-np.inf)
    if sinks is not None:
        m = np.maximum(m, sinks)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m[..., None])
    denom = e.sum(axis=-1)
    if sinks is not None:
        denom = denom + np.exp(sinks - m)
    lse = np.log(denom) if bug == "lse_without_max" else m + np.log(denom)
    if bug == "lse_base2":
        lse = lse / np.log(2.0)
    if bug == "empty_row_nan":
        return e / denom[..., None], lse
    # denom == 0 only for a row with no visible key and no sink: its probabilities are all 0.
    safe = np.where(denom > 0, denom, 1.0)
    return e / safe[..., None], lse


# --- forward ------------------------------------------------------------------------------------

def _forward(p, bug=None):
    if p.causal and p.window_right >= 0:
        return REFUSE  # malformed: the causal mask already is the right limit
    kv_head = _kv_head_of(p, bug)
    with np.errstate(all="ignore"):
        for rows, _, q, k, v, a in _sequences(p, bug):
            if q.shape[1] == 0:
                continue
            s, _ = _scores(p, q, k[kv_head], a, bug)
            prob, lse = _softmax_rows(p, s, _visible(p, a, k.shape[1], bug), bug)
            out = prob @ v[kv_head]  # (Hq, Tq, Dv)
            if bug == "last_row_unwritten":
                out_rows = (rows[0], rows[1], slice(rows[2].start, rows[2].stop - 1))
                p.out[out_rows] = from_f32(out[:, :-1], p.dtype)
            else:
                p.out[rows] = from_f32(out, p.dtype)
            if p.lse is not None:
                p.lse[rows] = lse.astype(np.float32)
    return None


def attention(p):
    """Forward pass: writes p.out (and p.lse when not None)."""
    return _forward(p)


# --- backward -----------------------------------------------------------------------------------

def _backward(p, g, bug=None):
    if p.layout == "paged" or (p.causal and p.window_right >= 0):
        return REFUSE
    hq, hk = p.q_heads, p.kv_heads
    group = hq // hk
    kv_head = _kv_head_of(p)
    # Padding rows of dk/dv, keys no row sees and rows that see nothing all get 0.
    for t in (g.dq, g.dk, g.dv):
        t[...] = 0
    dsinks = np.zeros(hq)
    with np.errstate(all="ignore"):
        for rows, krows, q, k, v, a in _sequences(p):
            tq, tk = q.shape[1], k.shape[1]
            if tq == 0:
                continue
            kx, vx = k[kv_head], v[kv_head]
            s, raw = _scores(p, q, kx, a)
            vis = _visible(p, a, tk)
            lse = p.lse[rows].astype(np.float64)[..., None]
            # The forward's probabilities, rebuilt from its lse (which includes the sink).
            prob = np.exp(s - lse) if bug == "mask_ignored" else np.where(vis, np.exp(s - lse), 0.0)
            dout = _load(g.dout[rows], p.dtype)
            out = _load(p.out[rows], p.dtype)
            dv = prob.transpose(0, 2, 1) @ dout                # (Hq, Tk, Dv)
            dprob = dout @ vx.transpose(0, 2, 1)               # (Hq, Tq, Tk)
            d = np.sum(dout * out, axis=-1)                    # (Hq, Tq)
            ds = prob * dprob if bug == "ds_missing_d" else prob * (dprob - d[..., None])
            if p.softcap > 0 and bug != "softcap_grad_missing":
                ds = ds * (1.0 - np.tanh(raw / p.softcap) ** 2)
            dq = p.scale * (ds @ kx)                           # (Hq, Tq, Dk)
            dk = p.scale * (ds.transpose(0, 2, 1) @ q)         # (Hq, Tk, Dk)
            # Query heads hk*group .. hk*group + group - 1 read kv head hk: sum their gradients.
            if bug == "gqa_grad_first_head":
                dk, dv = dk[::group], dv[::group]
            else:
                dk = dk.reshape(hk, group, tk, p.head_dim).sum(axis=1)
                dv = dv.reshape(hk, group, tk, p.value_dim).sum(axis=1)
            if p.sinks is not None:
                w = np.exp(p.sinks.astype(np.float64)[:, None] - lse[..., 0])
                dsinks += (w * d).sum(axis=1) if bug == "dsinks_sign" else -(w * d).sum(axis=1)
            g.dq[rows] = from_f32(dq, p.dtype)
            g.dk[krows] = from_f32(dk, p.dtype)
            g.dv[krows] = from_f32(dv, p.dtype)
    if g.dsinks is not None:
        g.dsinks[...] = dsinks.astype(np.float32)
    return None


def attention_backward(p, g):
    """Backward pass: writes g.dq, g.dk, g.dv (and g.dsinks when not None)."""
    return _backward(p, g)


# --- planted bugs -------------------------------------------------------------------------------

_FORWARD_BUGS = {
    "causal_off_by_one": "causal mask j < a: a row no longer sees its own key",
    "ignore_q_pos": "row i taken at position i, not q_pos[b] + i (the KV-cache offset bug)",
    "no_max_subtraction": "softmax without subtracting the row max: float32 exp overflows",
    "empty_row_nan": "a row that sees no key divides 0 by 0 and stores NaN instead of 0",
    "scale_ignored": "scale taken as 1/sqrt(head_dim) whatever p.scale says",
    "gqa_modulo": "query head h reads kv head h % Hk instead of h // (Hq / Hk)",
    "window_off_by_one": "left window j > a - window_left: one key too few",
    "softcap_after_alibi": "softcap applied to the score with the ALiBi bias in it",
    "softcap_before_scale": "softcap applied to q.k, the scale multiplied in afterwards",
    "alibi_sign_flipped": "ALiBi bias added instead of subtracted",
    "lse_without_max": "lse = log(sum exp(s - m)), the row max never added back",
    "lse_base2": "lse stored in base 2, as FlashAttention-style kernels keep it internally",
    "sinks_ignored": "the sink logit left out of the softmax denominator",
    "varlen_keys_from_row0": "varlen keys of every sequence read from packed row 0",
    "padding_keys_read": "all kv_len key rows attended, past kv_lens[b] (padding)",
    "paged_table_row0": "paged cache: the block table row of sequence 0 used for all",
    "paged_no_table": "paged cache: logical block number used as the physical block",
    "last_row_unwritten": "the last query row of each sequence never stored",
}

_BACKWARD_BUGS = {
    "gqa_grad_first_head": "dk, dv of a kv head taken from the first query head of its group",
    "ds_missing_d": "dS = P * dP, the -D_i term (softmax Jacobian) dropped",
    "mask_ignored": "backward rebuilds P from unmasked scores",
    "softcap_grad_missing": "the softcap factor 1 - tanh^2 left out of dS",
    "dsinks_sign": "dsinks with the wrong sign",
}


def _named(fn, bug, doc):
    wrapper = functools.partial(fn, bug=bug)
    wrapper.__doc__ = doc
    return wrapper


MUTANTS = {name: _named(_forward, name, doc) for name, doc in _FORWARD_BUGS.items()}
BACKWARD_MUTANTS = {name: _named(_backward, name, doc) for name, doc in _BACKWARD_BUGS.items()}
