#!/usr/bin/env python3
"""An independent float64 NumPy implementation of the decoder of docs/spec/MODEL.md.

Why it exists: the C++ reference decoder is the oracle of the whole suite, so a bug in it would
be invisible to every comparison against it. This file was written from MODEL.md alone (not
from the C++ code), in a different language and style, with its own safetensors reader, so that
agreement between the two is evidence that both implement the spec.

Usage:
    decoder_numpy.py MODEL.safetensors TOKENS OUT.npy [MEMORY.npy VALID_LEN]
    decoder_numpy.py --batch LIST.txt

LIST.txt holds one such set of arguments per line, separated by tabs: one process for many
cases (a Python start with NumPy costs more than a small decoder's forward).

TOKENS is a comma-separated list of token ids ("3,1,4"). MEMORY.npy is [S, d] (float32 or
float64) and VALID_LEN the number of its rows that are real (the rest is padding); both are
required for a model with cross-attention and forbidden otherwise. OUT.npy receives the logits
[T, V] in float64. Exit status 0 on success, 2 with a message on stderr for a bad input.

Dimension legend: V vocab, d d_model, h heads, dk = d/h, f d_ff, L layers, N max_len,
T tokens, S memory rows.
"""
import json
import math
import struct
import sys

import numpy as np


class BadInput(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# safetensors: 8-byte little-endian header length, JSON header, raw little-endian data.
# ----------------------------------------------------------------------------------------------
def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise BadInput(f"{path}: shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise BadInput(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = blob[8 + header_len :]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise BadInput(f"{path}: tensor {name} has dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != 4 * count:
            raise BadInput(f"{path}: tensor {name} has offsets {begin}..{end} not fitting {shape}")
        arr = np.frombuffer(data, dtype="<f4", count=count, offset=begin).reshape(shape)
        tensors[name] = arr.astype(np.float64)  # every computation below is float64
    return meta, tensors


class Config:
    def __init__(self, meta):
        if meta.get("format") not in ("attncheck-decoder-1", "attncheck-decoder-2"):
            raise BadInput(f"metadata format is {meta.get('format')!r}")
        self.V = int(meta["vocab_size"])
        self.d = int(meta["d_model"])
        self.h = int(meta["n_heads"])
        self.f = int(meta["d_ff"])
        self.L = int(meta["n_layers"])
        self.N = int(meta["max_len"])
        self.norm = meta["norm"]  # "post" | "pre"
        self.cross = meta["cross_attention"] == "true"
        self.positional = meta["positional"]  # "sinusoidal" | "learned" | "rope"
        self.activation = meta["activation"]  # "relu" | "gelu" | "gelu_tanh"
        self.embed_scale = meta["embed_scale"]  # "sqrt_d_model" | "1"
        self.tied = meta["tie_embeddings"] == "true"
        self.eps = float(meta["ln_eps"])
        self.dk = self.d // self.h
        # Version 2 additions: grouped-query heads, a sliding window, rotary positions.
        self.hkv = int(meta.get("n_kv_heads", self.h))
        self.window = int(meta.get("attn_window", -1))
        self.theta = float(meta.get("rope_theta", 10000.0))


# ----------------------------------------------------------------------------------------------
# The pieces of MODEL.md, each a small function on float64 arrays.
# ----------------------------------------------------------------------------------------------
def dense(x, w, b):
    """nn.Linear: x [n, in], w [out, in], b [out] -> [n, out]."""
    return x @ w.T + b


def layer_norm(x, gamma, beta, eps):
    """Biased LayerNorm over the last axis. x [n, d]."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def act(kind, x):
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "gelu":  # exact: x * Phi(x); math.erf element-wise, NumPy has no erf
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if kind == "gelu_tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))
    raise BadInput(f"unknown activation {kind!r}")


def sinusoid_table(n, d):
    """pos[p, 2i] = sin(p / 10000^(2i/d)), pos[p, 2i+1] = cos(same). [n, d]"""
    table = np.zeros((n, d))
    p = np.arange(n, dtype=np.float64)[:, None]  # [n, 1]
    two_i = np.arange(0, d, 2, dtype=np.float64)[None, :]  # [1, ceil(d/2)]
    angle = p / np.power(10000.0, two_i / d)  # [n, ceil(d/2)]
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)[:, : d // 2]  # odd d: the last sine has no cosine
    return table


def rotate(cfg, y):
    """Rotary positions on every head of y [T, n*dk]: row p at position p; in each head, the
    pair (y_i, y_{i+dk/2}) is rotated by the angle p * theta^(-2i/dk)."""
    half = cfg.dk // 2
    p = np.arange(y.shape[0], dtype=np.float64)[:, None]  # [T, 1]
    angle = p * cfg.theta ** (-2.0 * np.arange(half, dtype=np.float64) / cfg.dk)[None, :]  # [T, dk/2]
    cos, sin = np.cos(angle), np.sin(angle)
    out = y.copy()
    for head in range(y.shape[1] // cfg.dk):
        a = y[:, head * cfg.dk : head * cfg.dk + half]
        b = y[:, head * cfg.dk + half : (head + 1) * cfg.dk]
        out[:, head * cfg.dk : head * cfg.dk + half] = a * cos - b * sin
        out[:, head * cfg.dk + half : (head + 1) * cfg.dk] = a * sin + b * cos
    return out


def mha(cfg, W, prefix, x, src, causal, n_valid, is_self):
    """Multi-head attention. x [T, d] queries, src [S, d] keys/values. -> [T, d]
    Self-attention (is_self) has cfg.hkv key/value heads, the window and rotary positions."""
    q = dense(x, W[prefix + "q.weight"], W[prefix + "q.bias"])  # [T, d]
    k = dense(src, W[prefix + "k.weight"], W[prefix + "k.bias"])  # [S, hkv*dk]
    v = dense(src, W[prefix + "v.weight"], W[prefix + "v.bias"])  # [S, hkv*dk]
    if is_self and cfg.positional == "rope":
        q, k = rotate(cfg, q), rotate(cfg, k)
    T, S = x.shape[0], src.shape[0]
    # allowed[i, j]: key j may be seen by query i
    allowed = np.arange(S)[None, :] < n_valid  # [1, S]
    allowed = np.broadcast_to(allowed, (T, S)).copy()
    if causal:
        allowed &= np.arange(S)[None, :] <= np.arange(T)[:, None]
    if is_self and cfg.window >= 0:
        allowed &= np.arange(S)[None, :] >= np.arange(T)[:, None] - cfg.window
    kv_heads = cfg.hkv if is_self else cfg.h
    heads = []
    for j in range(cfg.h):
        sl = slice(j * cfg.dk, (j + 1) * cfg.dk)
        kj = j // (cfg.h // kv_heads)  # the key/value head of query head j
        kl = slice(kj * cfg.dk, (kj + 1) * cfg.dk)
        s = (q[:, sl] @ k[:, kl].T) * (1.0 / math.sqrt(cfg.dk))  # [T, S]
        s = np.where(allowed, s, -np.inf)
        out = np.zeros((T, cfg.dk))
        live = allowed.any(axis=1)  # rows with at least one key; the others stay 0
        if live.any():
            sl_live = s[live]
            e = np.exp(sl_live - sl_live.max(axis=1, keepdims=True))
            probs = e / e.sum(axis=1, keepdims=True)
            out[live] = probs @ v[:, kl]
        heads.append(out)
    o = np.concatenate(heads, axis=1)  # [T, d]
    return dense(o, W[prefix + "o.weight"], W[prefix + "o.bias"])


def decode(cfg, W, tokens, memory, n_valid):
    T = len(tokens)
    scale = math.sqrt(cfg.d) if cfg.embed_scale == "sqrt_d_model" else 1.0
    x = W["embed.weight"][np.asarray(tokens)] * scale  # [T, d]
    if cfg.positional == "learned":
        x = x + W["pos.weight"][:T]
    elif cfg.positional == "sinusoidal":
        x = x + sinusoid_table(cfg.N, cfg.d)[:T]

    def residual(x, norm_name, fn):
        g, b = W[norm_name + ".weight"], W[norm_name + ".bias"]
        if cfg.norm == "post":
            return layer_norm(x + fn(x), g, b, cfg.eps)
        return x + fn(layer_norm(x, g, b, cfg.eps))

    for i in range(cfg.L):
        pre = f"layers.{i}."
        x = residual(x, pre + "norm_self",
                     lambda y: mha(cfg, W, pre + "self_attn.", y, y, True, T, True))
        if cfg.cross:
            x = residual(x, pre + "norm_cross",
                         lambda y: mha(cfg, W, pre + "cross_attn.", y, memory, False, n_valid, False))

        def ffn(y):
            hid = act(cfg.activation, dense(y, W[pre + "ffn.fc1.weight"], W[pre + "ffn.fc1.bias"]))
            return dense(hid, W[pre + "ffn.fc2.weight"], W[pre + "ffn.fc2.bias"])

        x = residual(x, pre + "norm_ffn", ffn)
    if cfg.norm == "pre":
        x = layer_norm(x, W["final_norm.weight"], W["final_norm.bias"], cfg.eps)
    head = W["embed.weight"] if cfg.tied else W["lm_head.weight"]
    return x @ head.T  # [T, V]


def main(argv):
    if len(argv) == 3 and argv[1] == "--batch":
        with open(argv[2], encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        for n, line in enumerate(lines, 1):
            try:
                run_one([argv[0]] + line.split("\t"))
            except BadInput as e:
                raise BadInput(f"{argv[2]}:{n}: {e}") from e
        return 0
    return run_one(argv)


def run_one(argv):
    if len(argv) not in (4, 6):
        raise BadInput(__doc__)
    meta, W = read_safetensors(argv[1])
    cfg = Config(meta)
    tokens = [int(t) for t in argv[2].split(",")]
    if not tokens or len(tokens) > cfg.N or min(tokens) < 0 or max(tokens) >= cfg.V:
        raise BadInput(f"tokens {tokens} outside the vocabulary [0, {cfg.V}) or length > {cfg.N}")
    memory, n_valid = None, 0
    if len(argv) == 6:
        if not cfg.cross:
            raise BadInput("memory given to a model without cross-attention")
        memory = np.load(argv[4]).astype(np.float64)
        n_valid = int(argv[5])
        if memory.ndim != 2 or memory.shape[1] != cfg.d or not 0 <= n_valid <= memory.shape[0]:
            raise BadInput(f"memory of shape {memory.shape} / valid length {n_valid} do not fit d={cfg.d}")
    elif cfg.cross:
        raise BadInput("the model has cross-attention: give MEMORY.npy and VALID_LEN")
    logits = decode(cfg, W, tokens, memory, n_valid)
    np.save(argv[3], logits)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (BadInput, KeyError, ValueError, OSError) as e:
        print(f"decoder_numpy.py: {e}", file=sys.stderr)
        sys.exit(2)
