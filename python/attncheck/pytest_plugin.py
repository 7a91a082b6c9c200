"""attncheck's pytest plugin: a kernel test is one decorated function.

    import attncheck.pytest_plugin as ac

    @ac.kernel_test(declare="dtype=f32; paged=no")
    def test_my_kernel(p):          # the kernel itself: attncheck calls it on every case
        ...                         # fill p.out

pytest collects ``test_my_kernel`` as a test that runs attncheck.check_kernel on the function;
a failing property fails the test with the report (the shrunk case, the worst element, and the
line that replays it). Options: ``--attncheck-seed N``, ``--attncheck-cases N``,
``--attncheck-property NAME[,NAME]``. The plugin loads itself when attncheck is installed (entry
point ``pytest11``); otherwise add ``pytest_plugins = ["attncheck.pytest_plugin"]`` to a
conftest.py, or run ``pytest -p attncheck.pytest_plugin``.
"""

from __future__ import annotations

import shlex
from typing import Callable, Optional

import pytest

import attncheck


def pytest_addoption(parser):
    group = parser.getgroup("attncheck", "attncheck kernel checks")
    group.addoption("--attncheck-seed", type=int, default=None,
                    help="RapidCheck seed of every attncheck kernel test (default: the fixed seed)")
    group.addoption("--attncheck-cases", type=int, default=None,
                    help="random cases per kernel property (default: each test's own, 300)")
    group.addoption("--attncheck-property", default=None,
                    help="comma-separated property names to run (default: all)")


def pytest_configure(config):
    config.addinivalue_line("markers", "attncheck: a kernel test run through attncheck.check_kernel")
    defaults = {}
    seed = config.getoption("--attncheck-seed", default=None)
    cases = config.getoption("--attncheck-cases", default=None)
    props = config.getoption("--attncheck-property", default=None)
    if seed is not None:
        if seed < 0:
            raise pytest.UsageError("--attncheck-seed must be a non-negative integer")
        defaults["seed"] = seed
    if cases is not None:
        if cases < 1:
            raise pytest.UsageError("--attncheck-cases must be a positive integer")
        defaults["cases"] = defaults["decoder_cases"] = cases
    if props:
        defaults["properties"] = [p for p in props.split(",") if p]
    attncheck._session_defaults.clear()
    attncheck._session_defaults.update(defaults)


def kernel_test(declare: str = "", *, backward: Optional[Callable] = None, properties=None,
                cases: Optional[int] = None, seed: Optional[int] = None, shrink_time: float = 5.0,
                decoder: bool = True, decoder_cases: Optional[int] = None, allow_unchecked: bool = False):
    """Decorates a kernel ``fn(p)`` into a pytest test that checks it with attncheck.check_kernel
    (the arguments are check_kernel's; --attncheck-cases and --attncheck-seed override cases and
    seed)."""

    def decorate(fn: Callable):
        def test(request):
            cfg = request.config
            opt_cases = cfg.getoption("--attncheck-cases", default=None)
            opt_seed = cfg.getoption("--attncheck-seed", default=None)
            replay = ("pytest " + shlex.quote(request.node.nodeid) +
                      " --attncheck-seed {seed} --attncheck-cases {cases} --attncheck-property {property}")
            try:
                attncheck.check_kernel(
                    fn, declare, properties, cases=opt_cases or cases, seed=opt_seed if opt_seed is not None else seed,
                    shrink_time=shrink_time, backward=backward, decoder=decoder,
                    decoder_cases=opt_cases or decoder_cases, allow_unchecked=allow_unchecked,
                    name=fn.__name__, replay=replay)
            except attncheck.CheckFailed as e:
                pytest.fail(str(e), pytrace=False)

        test.__name__ = fn.__name__
        test.__qualname__ = fn.__qualname__
        test.__doc__ = fn.__doc__
        test.__module__ = fn.__module__
        test.kernel = fn  # the kernel itself, for calling it elsewhere
        return pytest.mark.attncheck(test)

    return decorate
