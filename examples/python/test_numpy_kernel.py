"""The NumPy kernel of numpy_kernel.py under attncheck: the correct kernel (forward, backward and
inside the decoder) passes every property; each planted bug of MUTANTS and BACKWARD_MUTANTS,
the mutant zoo's bugs written in NumPy, is killed."""

import pytest

import attncheck
from attncheck.pytest_plugin import kernel_test

import numpy_kernel as nk

# Everything the ABI has, attention sinks included.
DECLARE = "sinks=yes"


@kernel_test(DECLARE, backward=nk.attention_backward)
def test_numpy_kernel(p):
    """The default check: 300 cases per property, the gradient properties, the decoder."""
    return nk.attention(p)


# A mutant is killed when a property fails. The properties that compare with the oracle kill
# every one of them; the rest of the suite is left out here only to keep the run short.
@pytest.mark.parametrize("name", sorted(nk.MUTANTS))
def test_forward_mutant_is_killed(name):
    r = attncheck.check_kernel(nk.MUTANTS[name], DECLARE, properties=["agreement", "lse"], cases=100,
                               decoder=False, shrink_time=0.5, raise_on_failure=False)
    assert not r.passed, f"{name} survived:\n{r.text}"
    assert any(x.status == "fail" and x.counterexample for x in r.properties)


@pytest.mark.parametrize("name", sorted(nk.BACKWARD_MUTANTS))
def test_backward_mutant_is_killed(name):
    r = attncheck.check_kernel(nk.attention, DECLARE, backward=nk.BACKWARD_MUTANTS[name],
                               properties=["grad_agreement"], cases=100, decoder=False, shrink_time=0.5,
                               raise_on_failure=False)
    assert r["grad_agreement"].status == "fail", f"{name} survived:\n{r.text}"
