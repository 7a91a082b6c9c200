"""The Python package attncheck: check_kernel's calls and verdicts, what a kernel may return and
how each bad answer is reported, the oracle on problems of one's own, and the views' lifetime.
Run by ctest (python:module) with the build tree's package on PYTHONPATH."""

import os
import signal
import threading

import numpy as np
import pytest

import attncheck

FAST = dict(cases=30, decoder=False, shrink_time=1.0)


def _softmax_rows(p, b, h, to32=attncheck.to_float32, off_by_one=False):
    """A plain float64 evaluation of one (sequence, head) of p, for the small kernels here;
    off_by_one: the planted bug of a causal mask one key to the left (j < a)."""
    start, n = p.queries(b)
    q = to32(p.rows(p.q, b, h), p.dtype).astype(np.float64)
    hk = p.kv_head(h)
    k = to32(p.key_rows(p.k, b, hk), p.dtype).astype(np.float64)
    v = to32(p.key_rows(p.v, b, hk), p.dtype).astype(np.float64)
    s = p.scale * q @ k.T
    a = int(p.q_pos[b]) + np.arange(n)[:, None]
    j = np.arange(k.shape[0])[None, :]
    visible = np.ones(s.shape, dtype=bool)
    if p.causal:
        visible &= (j < a) if off_by_one else (j <= a)
    if p.window_left >= 0:
        visible &= j >= a - p.window_left
    if not p.causal and p.window_right >= 0:
        visible &= j <= a + p.window_right
    s = np.where(visible, s, -np.inf)
    m = np.max(s, axis=1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(axis=1, keepdims=True)
    out = np.where(z > 0, (e @ v) / np.where(z > 0, z, 1.0), 0.0)
    lse = np.where(z[:, 0] > 0, np.log(np.where(z[:, 0] > 0, z[:, 0], 1.0)) + m[:, 0], -np.inf)
    return out, lse


# A small correct kernel: float32 and float16, dense and varlen, no softcap, ALiBi or sinks.
SIMPLE = "dtype=f32,f16; paged=no; softcap=no; alibi=no"


def simple_kernel(p):
    attncheck.require_declared(p, SIMPLE)
    for b in range(p.batch):
        for h in range(p.q_heads):
            out, lse = _softmax_rows(p, b, h)
            p.rows(p.out, b, h)[...] = attncheck.from_float32(out, p.dtype)
            if p.lse is not None:
                p.rows(p.lse, b, h)[...] = lse


def test_a_correct_kernel_passes_every_property():
    r = attncheck.check_kernel(simple_kernel, SIMPLE, **FAST)
    assert r.passed
    names = [x.property for x in r.properties]
    for must in ("agreement", "causality", "row_sums", "probabilities", "determinism", "batch"):
        assert must in names
    assert all(x.status in ("pass", "not applicable") for x in r.properties)
    assert r["agreement"].cases >= 30


def test_the_builtin_through_python_passes_with_the_decoder():
    r = attncheck.check_kernel(attncheck.builtin("reference_v2"), "", cases=20, decoder_cases=3, shrink_time=1.0)
    assert r.passed
    assert any(x.property.startswith("decoder") or x.property in ("logits_agreement", "cache_consistency")
               for x in r.properties), [x.property for x in r.properties]


def _mask_off_by_one(p):
    attncheck.require_declared(p, SIMPLE)
    for b in range(p.batch):
        for h in range(p.q_heads):
            out, _ = _softmax_rows(p, b, h, off_by_one=True)
            p.rows(p.out, b, h)[...] = attncheck.from_float32(out, p.dtype)
            if p.lse is not None:
                p.rows(p.lse, b, h)[...] = _softmax_rows(p, b, h)[1]


def test_a_planted_bug_fails_with_a_shrunk_case_and_a_replay_line():
    with pytest.raises(attncheck.CheckFailed) as e:
        attncheck.check_kernel(_mask_off_by_one, SIMPLE, properties=["agreement", "causality"], **FAST)
    r = e.value.result
    assert not r.passed and "agreement" in r.failed
    a = r["agreement"]
    assert a.status == "fail" and a.failed_at >= 1
    assert a.counterexample and "bound" in a.message
    assert "ATTNCHECK_SEED=" in a.replay and "--" not in a.replay.split("ATTNCHECK_PROPERTY")[0][:3]
    assert "FAILED" in str(e.value) and "shrunk to" in str(e.value)


def test_the_same_seed_gives_the_same_verdict_and_case():
    runs = [attncheck.check_kernel(_mask_off_by_one, SIMPLE, properties=["agreement"], seed=7,
                                   raise_on_failure=False, **FAST)["agreement"] for _ in range(2)]
    assert runs[0].failed_at == runs[1].failed_at
    assert runs[0].counterexample == runs[1].counterexample


@pytest.mark.parametrize("bad, expect", [
    (lambda p: p.out.astype(np.float64), "returned out as float64"),
    (lambda p: np.zeros((2, 3), p.out.dtype), "returned out of shape (2, 3)"),
    (lambda p: "done", "returned str"),
    (lambda p: True, "returned a bool"),
    (lambda p: p.q.__setitem__((0, 0, 0, 0), 1), "read-only"),
    (lambda p: 1 / 0, "ZeroDivisionError: division by zero"),
    (lambda p: None, "candidate nan"),
])
def test_a_bad_answer_is_a_failed_case_naming_the_property(bad, expect):
    r = attncheck.check_kernel(bad, SIMPLE, properties=["agreement"], raise_on_failure=False, **FAST)
    a = r["agreement"]
    assert a.status == "fail", a
    assert expect in a.message, a.message
    assert "agreement" in r.text and "case" in r.text


def test_returning_out_and_lse_is_the_same_as_writing_them():
    def returns(p):
        out = np.empty(p.out.shape, p.out.dtype)
        lse = None if p.lse is None else np.empty(p.lse.shape, np.float32)
        for b in range(p.batch):
            for h in range(p.q_heads):
                o, l = _softmax_rows(p, b, h)
                start, n = p.queries(b)
                ob = 0 if p.cu_seqlens_q is not None else b
                out[ob, h, start:start + n] = attncheck.from_float32(o, p.dtype)
                if lse is not None:
                    lse[ob, h, start:start + n] = l
        return out, lse
    assert attncheck.check_kernel(returns, SIMPLE, properties=["agreement"], **FAST).passed


def test_refusals_are_not_failures():
    def f32_only(p):
        if p.dtype != "float32":
            raise attncheck.Unsupported("float32 only")
        simple_kernel(p)
    r = attncheck.check_kernel(f32_only, SIMPLE, properties=["agreement"], **FAST)
    assert r["agreement"].unsupported > 0 and r.passed


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="no property named 'agreemnt'"):
        attncheck.check_kernel(simple_kernel, SIMPLE, properties=["agreemnt"], **FAST)
    with pytest.raises(ValueError, match="head_dim"):
        attncheck.check_kernel(simple_kernel, "head_dim=0", **FAST)
    with pytest.raises(ValueError, match="cases must be a positive integer"):
        attncheck.check_kernel(simple_kernel, SIMPLE, cases=0)
    with pytest.raises(TypeError, match="must be callable"):
        attncheck.check_kernel(42)


def test_one_check_at_a_time():
    def nested(p):
        attncheck.check_kernel(simple_kernel, SIMPLE, **FAST)
    r = attncheck.check_kernel(nested, SIMPLE, properties=["agreement"], raise_on_failure=False, **FAST)
    assert "another check is running" in r["agreement"].message


def test_keyboard_interrupt_stops_the_check():
    calls = []

    def interrupted(p):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        simple_kernel(p)
    with pytest.raises(KeyboardInterrupt):
        attncheck.check_kernel(interrupted, SIMPLE, **FAST)
    assert len(calls) == 3  # nothing more ran after it


def test_views_expire_after_the_call():
    kept = []

    def keeps(p):
        kept.append(p)
        simple_kernel(p)
    attncheck.check_kernel(keeps, SIMPLE, properties=["agreement"], cases=10, decoder=False)
    with pytest.raises(RuntimeError, match="valid only during the kernel call"):
        attncheck.reference(kept[0])


def test_the_oracle_on_a_problem_of_ones_own():
    rng = np.random.default_rng(1)
    B, T, H, D = 2, 7, 3, 16
    qkv = rng.standard_normal((3, B, T, H, D)).astype(np.float32)
    # [B, T, H, D] arrays, taken as they are through a transposed view
    q, k, v = (x.transpose(0, 2, 1, 3) for x in qkv)
    p = attncheck.problem(q, k, v, causal=True)
    assert p.out.shape == (B, H, T, D) and p.lse.shape == (B, H, T)
    ref = attncheck.reference(p)
    for b in range(B):
        for h in range(H):
            o, l = _softmax_rows(p, b, h)
            assert np.allclose(ref.out[b, h], o, rtol=0, atol=1e-12)
            assert np.allclose(ref.lse[b, h], l, rtol=0, atol=1e-12)
    assert np.all(ref.out_bound > 0) and np.all(ref.out_bound < 1e-4)
    p.out[...] = ref.out.astype(np.float32)
    p.lse[...] = ref.lse.astype(np.float32)
    attncheck.check_output(p)
    p.out[1, 2, 3, 4] += 1e-3
    with pytest.raises(AssertionError, match=r"out\[1, 2, 3, 4\]"):
        attncheck.check_output(p)
    with pytest.raises(ValueError, match="kv_heads"):
        attncheck.problem(q, k[:, :2], v[:, :2])


def test_bfloat16_conversions_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.0e38, np.inf, np.nan], np.float32)
    bits = attncheck.f32_to_bf16(x)
    back = attncheck.bf16_to_f32(bits)
    assert back[0] == 1.0 and back[1] == 1.0          # a tie rounds to even (down)
    assert back[2] == np.float32(1.015625)             # a tie rounds to even (up)
    assert np.isinf(back[4]) and np.isnan(back[5])


def test_a_kernel_in_another_thread_is_refused_while_a_check_runs():
    started, release, seen = threading.Event(), threading.Event(), []

    def slow(p):
        started.set()
        release.wait(5)
        simple_kernel(p)

    t = threading.Thread(target=lambda: attncheck.check_kernel(slow, SIMPLE, properties=["agreement"],
                                                               cases=10, decoder=False))
    t.start()
    started.wait(5)
    try:
        attncheck.check_kernel(simple_kernel, SIMPLE, cases=10, decoder=False)
    except RuntimeError as e:
        seen.append(str(e))
    release.set()
    t.join()
    assert seen and "another check is running" in seen[0]
