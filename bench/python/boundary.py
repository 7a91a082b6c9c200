"""The cost of the Python boundary: the same C kernel (the float64 reference kernel of version 2)
checked through the C ABI (the engine calls it directly) and as a Python kernel (every call
crosses into Python: the GIL, the Problem and its NumPy views, the return checks, and back).
Both runs use the same properties, seed and cases, so they make the same kernel calls; the
difference per call is the boundary's cost. Pairs run interleaved; the report is the median
ratio and the median extra microseconds per kernel call.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/boundary.py [--pairs 5] [--cases 100] [--json F]
"""

import argparse
import json
import statistics
import time

import attncheck
from attncheck import _attncheck

# Properties that call the kernel a known number of times per case, with no decoder.
PROPERTIES = ["agreement", "causality", "batch", "determinism", "row_sums"]


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    calls = [0]
    py_kernel = attncheck.builtin("reference_v2")

    def counting(p):
        calls[0] += 1
        return py_kernel(p)

    attncheck.check_kernel(counting, "", PROPERTIES, cases=a.cases, decoder=False, shrink_time=0)
    n_calls = calls[0]

    c_times, py_times = [], []
    for _ in range(a.pairs):
        c_times.append(timed(lambda: _attncheck.check_builtin("reference_v2", "", PROPERTIES, a.cases, False, 0)))
        py_times.append(timed(lambda: attncheck.check_kernel(py_kernel, "", PROPERTIES, cases=a.cases,
                                                              decoder=False, shrink_time=0)))
    ratios = [p / c for p, c in zip(py_times, c_times)]
    extra_us = [(p - c) / n_calls * 1e6 for p, c in zip(py_times, c_times)]
    result = {
        "kernel_calls": n_calls,
        "properties": PROPERTIES,
        "cases": a.cases,
        "pairs": a.pairs,
        "c_abi_seconds": c_times,
        "python_seconds": py_times,
        "ratio_median": statistics.median(ratios),
        "extra_us_per_call_median": statistics.median(extra_us),
    }
    print(f"{n_calls} kernel calls per run ({', '.join(PROPERTIES)}; {a.cases} cases), {a.pairs} interleaved pairs")
    print(f"  C ABI      median {statistics.median(c_times):.3f} s")
    print(f"  Python     median {statistics.median(py_times):.3f} s")
    print(f"  ratio      {result['ratio_median']:.2f}x  (Python / C ABI, median of the pairs' ratios)")
    print(f"  boundary   {result['extra_us_per_call_median']:.1f} us per kernel call (median)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
