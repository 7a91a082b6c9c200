"""PyTorch's scaled dot-product attention (Debian's python3-torch 1.13, CPU) checked as it is:
what passes, and what attncheck finds (docs/python.md, "What it finds in PyTorch 1.13")."""

import functools

import attncheck
import attncheck.torch
from attncheck.pytest_plugin import kernel_test

import torch_sdpa


@kernel_test(torch_sdpa.DECLARE, cases=100)
def test_sdpa_with_a_mask_from_the_positions(p):
    """float32 with an explicit mask: every kernel property and the decoder-level ones pass."""
    return attncheck.torch.wrap(torch_sdpa.sdpa_masked)(p)


def test_is_causal_is_aligned_top_left_and_a_cached_step_fails():
    # is_causal masks key j > row i: right for a prefill (q_pos = 0), wrong for any call whose
    # query rows come after cached keys (a decode step sees key 0 only).
    r = attncheck.check_kernel(attncheck.torch.wrap(torch_sdpa.sdpa_is_causal), torch_sdpa.DECLARE_IS_CAUSAL,
                               properties=["agreement"], cases=100, decoder=False, raise_on_failure=False)
    a = r["agreement"]
    assert a.status == "fail"
    q_pos = a.counterexample.split("q_pos=[")[1].split("]")[0]
    assert any(int(x) > 0 for x in q_pos.split(",")), a.counterexample  # shrunk to a cached call


def test_bfloat16_on_the_cpu_rounds_beyond_the_bound_even_with_rounded_probabilities():
    # 1.13's CPU path evaluates scores, exponentials and sums in bfloat16: outside the bound of
    # float32 accumulation (about 50x), and of one rounding of the probabilities too.
    declare = torch_sdpa.DECLARE.replace("dtype=f32", "dtype=bf16") + "; rounds_probabilities=yes"
    fn = attncheck.torch.wrap(functools.partial(torch_sdpa.sdpa_masked, declare=declare))
    r = attncheck.check_kernel(fn, declare, properties=["agreement", "row_sums"], cases=100, decoder=False,
                               raise_on_failure=False)
    assert r["agreement"].status == "fail" or r["row_sums"].status == "fail"


def test_float16_has_no_cpu_matmul_and_the_exception_is_the_failure():
    declare = torch_sdpa.DECLARE.replace("dtype=f32", "dtype=f16")
    fn = attncheck.torch.wrap(functools.partial(torch_sdpa.sdpa_masked, declare=declare))
    r = attncheck.check_kernel(fn, declare, properties=["agreement"], cases=10, decoder=False,
                               raise_on_failure=False)
    assert "not implemented for 'Half'" in r["agreement"].message
