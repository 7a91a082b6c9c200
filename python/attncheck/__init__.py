"""attncheck from Python: check an attention kernel written in NumPy, PyTorch, Triton or CUDA
with attncheck's property suite (the same C++ engine, generators, shrinking and float64 oracle as
``attncheck fuzz``), and use the oracle in your own tests.

    import attncheck

    def my_kernel(p):                  # p: attncheck.Problem, NumPy views of the call's tensors
        ...                            # fill p.out (and p.lse when it is not None)

    attncheck.check_kernel(my_kernel, declare="dtype=f32; paged=no")   # raises on failure

A kernel receives one ``Problem`` per call (docs/python.md has the fields): q, k, v read-only
views, out and lse writable views, all valid only during the call. It fills out in place and
returns None, or returns out (an array of out's shape and dtype) or (out, lse); it refuses a
problem it does not support by raising ``attncheck.Unsupported`` (or returning a nonzero int).
Any other exception is a failed case: the report names the exception, the property and the
shrunk case. A backward ``fn(p, g)`` fills g.dq, g.dk, g.dv (and g.dsinks) the same way.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import _attncheck

__all__ = [
    "Problem", "Grads", "Unsupported", "CheckFailed", "CheckResult", "PropertyOutcome",
    "check_kernel", "require_declared", "problem", "reference", "check_output", "Reference",
    "bf16_to_f32", "f32_to_bf16", "to_float32", "from_float32",
]

# The seed when none is given: fixed, so that a test is reproducible (the C++ check_kernel's).
DEFAULT_SEED = 20240611


class Unsupported(Exception):
    """Raised by a kernel for a problem it does not support (as a whole): the case is refused,
    not failed. A property with fewer than 10 supported cases is reported "not checked"."""


class CheckFailed(AssertionError):
    """check_kernel found a property that does not hold. ``str(e)`` is the report (the table,
    and per failure the shrunk case, the worst element and a replay line); ``e.result`` is the
    CheckResult."""

    def __init__(self, result: "CheckResult"):
        super().__init__(result.text)
        self.result = result


@dataclasses.dataclass
class PropertyOutcome:
    property: str
    status: str           # pass, fail, not checked, error, skipped, not applicable
    cases: int            # cases run (passed or refused); for a failure, those before it
    unsupported: int      # of those, refused by the kernel
    budget: int           # cases asked for
    failed_at: int        # the first failing case (1-based), 0 when none
    counterexample: str   # the shrunk case
    message: str          # why it failed: the worst element, both values and the bound
    warning: str
    replay: str           # how to replay the failure ("" when it passed)
    seconds: float
    shrink_stopped: bool  # the shrink time ran out: the counterexample is not minimal

    @property
    def passed(self) -> bool:
        return self.status in ("pass", "not applicable")


@dataclasses.dataclass
class CheckResult:
    passed: bool
    text: str                       # the report, as the CLI's check prints it
    seed: int
    failed: list                    # names of the properties that failed
    properties: list                # PropertyOutcome per property run

    def __getitem__(self, name: str) -> PropertyOutcome:
        for p in self.properties:
            if p.property == name:
                return p
        raise KeyError(name)

    def __str__(self) -> str:
        return self.text


class Problem:
    """One attention problem of kernel ABI version 2 (include/attncheck/kernel_abi_v2.h), its
    tensors as NumPy views with axes (b, head, row, column):

    dense   q (B, Hq, q_len, Dk), k (B, Hk, kv_len, Dk), v (B, Hk, kv_len, Dv), out like q with Dv
    varlen  the same with a b axis of length 1 and the rows of every sequence packed:
            sequence b's rows are cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 (keys: cu_seqlens_k)
    paged   k (num_blocks, Hk, block_size, Dk), v likewise; key j of sequence b is row
            j % block_size of block block_table[b, j // block_size]
    lse     None, or float32 (B, Hq, q_len) (varlen: (1, Hq, rows)), indexed as out

    Element dtypes: float32, float16, and bfloat16 as uint16 bit patterns (bf16_to_f32).
    Row i of sequence b is at position q_pos[b] + i; key j is visible when j < keys(b) and
    (causal: j <= position), (window_left >= 0: j >= position - window_left), (window_right >= 0,
    not causal: j <= position + window_right). Scores: scale q.k, softcap, then minus
    alibi_slopes[h] * (position - j); sinks[h] joins each row's softmax denominator."""

    __slots__ = (
        "dtype", "layout", "batch", "q_heads", "kv_heads", "head_dim", "value_dim", "q_len", "kv_len",
        "kv_lens", "cu_seqlens_q", "cu_seqlens_k", "q_pos", "causal", "window_left", "window_right",
        "scale", "softcap", "alibi_slopes", "sinks", "block_table", "block_size", "num_blocks",
        "q", "k", "v", "out", "lse", "_handle",
    )

    def __init__(self, **fields: Any):
        for name, value in fields.items():
            setattr(self, name, value)

    # The per-sequence reading of the problem, as the ABI defines it.
    def queries(self, b: int) -> tuple[int, int]:
        """(first row, row count) of sequence b in q, out and lse."""
        if self.cu_seqlens_q is not None:
            return int(self.cu_seqlens_q[b]), int(self.cu_seqlens_q[b + 1] - self.cu_seqlens_q[b])
        return 0, self.q_len

    def keys(self, b: int) -> int:
        """The number of keys of sequence b."""
        if self.cu_seqlens_k is not None:
            return int(self.cu_seqlens_k[b + 1] - self.cu_seqlens_k[b])
        return int(self.kv_lens[b]) if self.kv_lens is not None else self.kv_len

    def kv_head(self, h: int) -> int:
        """The kv head query head h reads (grouped-query attention)."""
        return h // (self.q_heads // self.kv_heads)

    def key_rows(self, tensor: np.ndarray, b: int, hk: int) -> np.ndarray:
        """The keys(b) rows of sequence b, kv head hk, of k or v (or dk, dv), as a (keys, D) array:
        a view for dense and varlen, a gathered copy for paged."""
        n = self.keys(b)
        if self.block_table is not None:
            j = np.arange(n)
            blocks = self.block_table[b, j // self.block_size]
            return tensor[blocks, hk, j % self.block_size, :]
        if self.cu_seqlens_k is not None:
            start = int(self.cu_seqlens_k[b])
            return tensor[0, hk, start:start + n, :]
        return tensor[b, hk, :n, :]

    def rows(self, tensor: np.ndarray, b: int, h: int) -> np.ndarray:
        """Sequence b's rows of head h of q, out (or dout, dq) as a (rows, D) view, or of lse."""
        start, n = self.queries(b)
        outer = 0 if self.cu_seqlens_q is not None else b
        return tensor[outer, h, start:start + n]

    def describe(self) -> str:
        """One line: "dtype=bf16 B=2 Hq=8 Hk=2 Tq=5 Tk=97 Dk=64 ..."."""
        return self._handle.describe()

    def __repr__(self) -> str:
        try:
            return f"<attncheck.Problem {self.describe()}>"
        except RuntimeError:
            return "<attncheck.Problem (expired: valid only during its kernel call)>"


class Grads:
    """The gradient tensors of a backward call: dout (read-only, like out), dq (like q), dk (like
    k), dv (like v), dsinks (float32 (Hq,), or None without sinks), all to be written."""

    __slots__ = ("dout", "dq", "dk", "dv", "dsinks")

    def __init__(self, **fields: Any):
        for name, value in fields.items():
            setattr(self, name, value)


# ---- float16 / bfloat16 ----------------------------------------------------------------------

def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bfloat16, as uint16 bit patterns (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


def to_float32(a: np.ndarray, dtype: str) -> np.ndarray:
    """A problem tensor's values as float32 (bfloat16 bit patterns decoded)."""
    return bf16_to_f32(a) if dtype == "bfloat16" else np.asarray(a, dtype=np.float32)


def from_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to the problem's element dtype (bfloat16: uint16 bit patterns)."""
    if dtype == "bfloat16":
        return f32_to_bf16(x)
    return np.asarray(x, dtype=np.float16 if dtype == "float16" else np.float32)


# ---- the calls from the engine (python/module.cpp's trampolines) -------------------------------

def _expected_dtype(p: Problem) -> np.dtype:
    return p.out.dtype


def _store(target: np.ndarray, value: Any, what: str, p: Problem) -> None:
    """Copies a kernel's returned array into the problem's tensor: same shape, same dtype."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor returned as it is
        from . import torch as _t
        value = _t.to_numpy(value, p.dtype)
    a = np.asarray(value)
    if a.shape != target.shape:
        raise ValueError(f"the kernel returned {what} of shape {a.shape}; {what} has shape {target.shape}")
    if a.dtype != target.dtype:
        want = "uint16 bfloat16 bit patterns" if p.dtype == "bfloat16" and what == "out" else str(target.dtype)
        raise TypeError(f"the kernel returned {what} as {a.dtype}; the problem's {what} is {want} "
                        f"(dtype {p.dtype if what == 'out' else 'float32'})")
    target[...] = a


def _call_forward(fn: Callable, p: Problem) -> int:
    try:
        r = fn(p)
    except Unsupported:
        return 1
    if r is None:
        return 0
    if isinstance(r, (bool, np.bool_)):
        raise TypeError("the kernel returned a bool; expected None (out filled in place), an int return code, "
                        "out, or (out, lse)")
    if isinstance(r, (int, np.integer)):
        return int(r)
    if isinstance(r, tuple):
        if len(r) != 2:
            raise TypeError(f"the kernel returned a tuple of {len(r)}; expected (out, lse)")
        _store(p.out, r[0], "out", p)
        if p.lse is not None:
            if r[1] is None:
                raise ValueError("the problem asks for lse and the kernel returned (out, None)")
            _store(p.lse, r[1], "lse", p)
        return 0
    if isinstance(r, np.ndarray) or hasattr(r, "__array__"):
        _store(p.out, r, "out", p)
        return 0
    raise TypeError(f"the kernel returned {type(r).__name__}; expected None (out filled in place), an int "
                    "return code, out, or (out, lse)")


def _call_backward(fn: Callable, p: Problem, g: Grads) -> int:
    try:
        r = fn(p, g)
    except Unsupported:
        return 1
    if r is None:
        return 0
    if isinstance(r, (int, np.integer)) and not isinstance(r, (bool, np.bool_)):
        return int(r)
    if isinstance(r, tuple) and len(r) in (3, 4):
        for target, value, what in zip((g.dq, g.dk, g.dv), r[:3], ("dq", "dk", "dv")):
            _store(target, value, what, p)
        if len(r) == 4 and g.dsinks is not None:
            _store(g.dsinks, r[3], "dsinks", p)
        return 0
    raise TypeError(f"the backward returned {type(r).__name__}; expected None (gradients filled in place), "
                    "an int return code, or (dq, dk, dv[, dsinks])")


# ---- check_kernel --------------------------------------------------------------------------

# Set by the pytest plugin (--attncheck-seed, --attncheck-cases, --attncheck-property) and read
# when check_kernel's own arguments leave them open; the environment variables come first.
_session_defaults: dict = {}


def _env_int(name: str) -> Optional[int]:
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text}: expected a non-negative integer") from None
    if value < 0:
        raise ValueError(f"{name}={text}: expected a non-negative integer")
    return value


def check_kernel(fn: Callable, declare: str = "", properties: Optional[Sequence[str]] = None,
                 cases: Optional[int] = None, seed: Optional[int] = None, shrink_time: float = 5.0, *,
                 backward: Optional[Callable] = None, decoder: bool = True, decoder_cases: Optional[int] = None,
                 allow_unchecked: bool = False, name: Optional[str] = None, raise_on_failure: bool = True,
                 replay: Optional[str] = None) -> CheckResult:
    """Runs attncheck's kernel-level properties on ``fn`` (and, with ``decoder``, the
    decoder-level ones with fn inside attncheck's optimized decoder; with ``backward``, the
    gradient properties) and returns a CheckResult; raises CheckFailed when a property fails.

    declare     what the kernel supports and how it behaves, e.g. "dtype=f32,f16; paged=no;
                empty_rows=nan" (attncheck/declaration.hpp; ``attncheck fuzz --list``)
    properties  names of the properties to run (default: every applicable one)
    cases       random cases per kernel property (default 300; ATTNCHECK_CASES overrides)
    seed        the RapidCheck seed (default: ATTNCHECK_SEED, the pytest plugin's
                --attncheck-seed, else a fixed seed, so a test is reproducible)
    shrink_time seconds shrinking a failure may take per property (0: no limit)
    """
    if not callable(fn):
        raise TypeError(f"check_kernel: fn must be callable, got {type(fn).__name__}")
    if backward is not None and not callable(backward):
        raise TypeError(f"check_kernel: backward must be callable, got {type(backward).__name__}")
    if not isinstance(declare, str):
        raise TypeError("check_kernel: declare is a declaration line such as \"dtype=f32; paged=no\"")
    why = _attncheck.declaration_error(declare)
    if why:
        raise ValueError(f"check_kernel: {why}")
    env_cases = _env_int("ATTNCHECK_CASES")
    env_seed = _env_int("ATTNCHECK_SEED")
    env_props = os.environ.get("ATTNCHECK_PROPERTY")
    if env_cases is not None:
        cases = decoder_cases = env_cases
    if cases is None:
        cases = _session_defaults.get("cases", 300)
    if decoder_cases is None:
        decoder_cases = _session_defaults.get("decoder_cases", 20)
    if env_seed is not None:
        seed = env_seed
    if seed is None:
        seed = _session_defaults.get("seed", DEFAULT_SEED)
    if env_props:
        properties = [p for p in env_props.split(",") if p]
    elif properties is None and _session_defaults.get("properties"):
        properties = _session_defaults["properties"]
    if isinstance(properties, str):
        properties = [properties]
    for what, n in (("cases", cases), ("decoder_cases", decoder_cases)):
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ValueError(f"check_kernel: {what} must be a positive integer, got {n!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"check_kernel: seed must be a non-negative integer, got {seed!r}")
    name = name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "kernel"
    if replay is None:
        replay = _session_defaults.get("replay") or (
            "ATTNCHECK_SEED={seed} ATTNCHECK_CASES={cases} ATTNCHECK_PROPERTY={property} "
            "<your python test command>")
    d = _attncheck.check_kernel(fn, backward, name, declare, list(properties or []), int(cases),
                                int(decoder_cases), bool(decoder), int(seed), float(shrink_time),
                                bool(allow_unchecked), replay)
    result = CheckResult(passed=d["passed"], text=d["text"], seed=d["seed"], failed=list(d["failed"]),
                         properties=[PropertyOutcome(**x) for x in d["properties"]])
    if raise_on_failure and not result.passed:
        raise CheckFailed(result)
    return result


def require_declared(p: Problem, declare: str) -> None:
    """Raises Unsupported (the kernel refuses p) when p is outside the declaration ``declare``:
    a kernel must refuse what it does not declare (the property refuses_undeclared sends such
    problems, and a metamorphic property may pose its problem another way outside it)."""
    why = _attncheck.unsupported_reason(p, declare)
    if why:
        raise Unsupported(why)


# ---- problems of your own, and the oracle --------------------------------------------------------

def problem(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, dtype: Optional[str] = None, causal: bool = True,
            scale: Optional[float] = None, q_pos=None, kv_lens=None, cu_seqlens_q=None, cu_seqlens_k=None,
            window: tuple = (-1, -1), softcap: float = 0.0, alibi_slopes=None, sinks=None, block_table=None,
            lse: bool = True) -> Problem:
    """A problem of your own over q, k, v (axes (b, head, row, column), any non-negative strides:
    a [B, T, H, D] array's ``.transpose(0, 2, 1, 3)`` is taken as it is), for reference() and
    check_output() in your tests. out (and lse) are allocated. dtype: float32 and float16 from
    the arrays; "bfloat16" for uint16 bit patterns. q_pos: default bottom-right (the query rows
    are each sequence's last rows). scale: default 1/sqrt(head_dim)."""
    if dtype is None:
        dtype = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}.get(np.asarray(q).dtype)
        if dtype is None:
            raise TypeError(f"problem: q is {np.asarray(q).dtype}; use float32, float16, or uint16 with "
                            "dtype='bfloat16'")
    return _attncheck.make_problem(np.asarray(q), np.asarray(k), np.asarray(v), dtype, bool(causal), scale,
                                   q_pos, kv_lens, cu_seqlens_q, cu_seqlens_k, int(window[0]), int(window[1]),
                                   float(softcap), alibi_slopes, sinks, block_table, bool(lse))


@dataclasses.dataclass
class Reference:
    """The float64 oracle of a problem and the bound any correct evaluation in its dtype meets
    (docs/numerics.md): |kernel - out| <= out_bound element by element, the same for lse. Shapes
    are out's and lse's; elements no row has (varlen padding) are NaN."""
    out: np.ndarray
    out_bound: np.ndarray
    lse: np.ndarray
    lse_bound: np.ndarray


def reference(p: Problem, *, rounds_probabilities: bool = False, tanh_ulps: float = 2.0) -> Reference:
    """The float64 oracle of p (a Problem handed to a kernel, during its call, or one of
    problem()), with its bound."""
    return Reference(**_attncheck.reference(p, bool(rounds_probabilities), float(tanh_ulps)))


def check_output(p: Problem, out: Optional[np.ndarray] = None, lse: Optional[np.ndarray] = None, **oracle) -> None:
    """Asserts that out (default p.out) and lse (default p.lse) are within the oracle's bound,
    raising AssertionError with the worst element otherwise."""
    ref = reference(p, **oracle)
    out = p.out if out is None else out
    got = to_float32(np.asarray(out), p.dtype).astype(np.float64)
    _within("out", got, ref.out, ref.out_bound)
    lse = p.lse if lse is None else lse
    if lse is not None:
        got_lse = np.asarray(lse, dtype=np.float64)
        empty = np.isneginf(ref.lse)
        if np.any(empty & ~np.isneginf(got_lse)):
            at = tuple(int(i) for i in np.argwhere(empty & ~np.isneginf(got_lse))[0])
            raise AssertionError(f"lse{list(at)}: a row with no visible key has lse -inf, got {got_lse[at]}")
        _within("lse", np.where(empty, 0.0, got_lse), np.where(empty, 0.0, ref.lse), np.where(empty, 0.0, ref.lse_bound))


def _within(what: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> None:
    mask = ~np.isnan(want)
    bad_value = mask & ~np.isfinite(got)
    if np.any(bad_value):
        at = tuple(int(i) for i in np.argwhere(bad_value)[0])
        raise AssertionError(f"{what}{list(at)} is {got[at]} (oracle {want[at]!r})")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mask, np.abs(got - want) / np.maximum(bound, np.finfo(np.float64).tiny), 0.0)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    if ratio[worst] > 1.0:
        raise AssertionError(f"{what}{[int(i) for i in worst]}: {got[worst]!r} against the oracle's "
                             f"{want[worst]!r}: the difference {abs(got[worst] - want[worst]):.3g} is "
                             f"{ratio[worst]:.3g}x the bound {bound[worst]:.3g}")


def builtin(name: str = "reference_v2") -> Callable[[Problem], int]:
    """A built-in C kernel as a Python kernel (calls through the Python boundary): a known-good
    kernel for tests, and the measure of the boundary's cost against the C ABI."""
    def kernel(p: Problem) -> int:
        return _attncheck.run_builtin(name, p)
    kernel.__qualname__ = kernel.__name__ = name
    return kernel
