"""A kernel written on torch tensors, checked as it is.

    import attncheck, attncheck.torch

    def my_kernel(p):                       # p.q, p.k, p.v, p.out, p.lse: torch tensors
        p.out.copy_(my_attention(p.q, p.k, p.v, ...))   # or: return the out tensor

    attncheck.check_kernel(attncheck.torch.wrap(my_kernel), declare="...")

``wrap(fn, device="cpu")`` gives fn a TorchProblem: the fields of attncheck.Problem with every
tensor as a torch tensor (float32, float16, bfloat16; int32 for lengths, positions and the block
table). On the CPU the tensors share memory with the call's buffers (no copy); q, k, v must not be
written. On another device (device="cuda") the inputs are copied there, and out (and lse) copied
back after fn returns. fn fills out in place or returns out (or (out, lse)) as torch tensors;
raising attncheck.Unsupported refuses the problem.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import torch as _torch

from . import Problem, Unsupported  # noqa: F401  (Unsupported: raised by wrapped kernels)

_DTYPES = {"float32": _torch.float32, "float16": _torch.float16, "bfloat16": _torch.bfloat16}
_TENSORS = ("q", "k", "v", "out", "lse")
_ARRAYS = ("kv_lens", "cu_seqlens_q", "cu_seqlens_k", "q_pos", "alibi_slopes", "sinks", "block_table")


def from_numpy(a: np.ndarray, dtype: str) -> _torch.Tensor:
    """A problem tensor as a torch tensor sharing its memory (bfloat16 bit patterns as bfloat16)."""
    bf16 = dtype == "bfloat16" and a.dtype == np.uint16
    with warnings.catch_warnings():
        # q, k, v are read-only views: torch warns that it cannot mark them so.
        warnings.simplefilter("ignore", UserWarning)
        t = _torch.from_numpy(a.view(np.int16) if bf16 else a)  # torch has no uint16
    return t.view(_torch.bfloat16) if bf16 else t


def to_numpy(t: _torch.Tensor, dtype: str) -> np.ndarray:
    """A torch tensor as NumPy in the problem's element convention (bfloat16 as uint16 bits)."""
    t = t.detach().cpu()
    if t.dtype == _torch.bfloat16:
        return t.contiguous().view(_torch.int16).numpy().view(np.uint16)
    return t.numpy()


class TorchProblem:
    """attncheck.Problem's fields with torch tensors (see the module's documentation)."""

    def __init__(self, p: Problem, device: str):
        self.problem = p  # the NumPy problem (its helpers: queries, keys, kv_head, describe)
        for name in Problem.__slots__:
            if name == "_handle":
                continue
            value = getattr(p, name)
            if isinstance(value, np.ndarray):
                t = from_numpy(value, p.dtype if name in ("q", "k", "v", "out") else "")
                if device != "cpu":
                    t = t.to(device)
                value = t
            setattr(self, name, value)
        self.torch_dtype = _DTYPES[p.dtype]

    def queries(self, b: int):
        return self.problem.queries(b)

    def keys(self, b: int) -> int:
        return self.problem.keys(b)

    def kv_head(self, h: int) -> int:
        return self.problem.kv_head(h)

    def describe(self) -> str:
        return self.problem.describe()


def wrap(fn: Callable[[TorchProblem], Any], device: str = "cpu") -> Callable[[Problem], Any]:
    """fn on torch tensors as an attncheck kernel (see the module's documentation)."""
    if device != "cpu" and not _torch.device(device).type == "cpu":
        if _torch.device(device).type == "cuda" and not _torch.cuda.is_available():
            raise RuntimeError(f"attncheck.torch.wrap: device {device!r} is not available here")

    def kernel(p: Problem):
        tp = TorchProblem(p, device)
        with _torch.no_grad():
            r = fn(tp)
        if isinstance(r, _torch.Tensor):
            r = to_numpy(r, p.dtype)
        elif isinstance(r, tuple):
            r = tuple(to_numpy(x, p.dtype if i == 0 else "") if isinstance(x, _torch.Tensor) else x
                      for i, x in enumerate(r))
        elif r is None and device != "cpu":
            p.out[...] = to_numpy(tp.out, p.dtype)
            if p.lse is not None:
                p.lse[...] = to_numpy(tp.lse, "")
        return r

    kernel.__qualname__ = kernel.__name__ = getattr(fn, "__qualname__", getattr(fn, "__name__", "torch_kernel"))
    return kernel
