"""The pytest plugin, as a user runs it: a decorated kernel test in a fresh pytest process, its
failure report, the replay line it prints and its options, -x, -k and JUnit XML."""

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

KERNELS = textwrap.dedent('''
    import numpy as np
    import attncheck
    from attncheck.pytest_plugin import kernel_test

    DECLARE = "dtype=f32; paged=no; varlen=no; softcap=no; alibi=no; gqa=no; window=no; lse=no; padding=no"

    def attention(p, off_by_one=False):
        attncheck.require_declared(p, DECLARE)
        q = p.q.astype(np.float64); k = p.k.astype(np.float64); v = p.v.astype(np.float64)
        s = p.scale * q @ k.transpose(0, 1, 3, 2)
        a = p.q_pos[:, None, None, None] + np.arange(p.q_len)[None, None, :, None]
        j = np.arange(p.kv_len)[None, None, None, :]
        visible = (j < a) if off_by_one else (j <= a)
        if p.causal:
            s = np.where(visible, s, -np.inf)
        m = s.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        e = np.exp(s - m)
        z = e.sum(axis=-1, keepdims=True)
        p.out[...] = np.where(z > 0, e @ v / np.where(z > 0, z, 1), 0)

    @kernel_test(DECLARE, cases=25, decoder=False, shrink_time=1)
    def test_correct(p):
        attention(p)

    @kernel_test(DECLARE, cases=25, decoder=False, shrink_time=1, properties=["agreement"])
    def test_planted(p):
        attention(p, off_by_one=True)

    @kernel_test(DECLARE, cases=15, decoder=False)
    def test_correct_again(p):
        attention(p)
''')


def run_pytest(tmp_path, *args):
    (tmp_path / "test_kernels.py").write_text(KERNELS)
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_decorated_kernel_is_a_test_and_a_bug_a_failure_with_its_replay(tmp_path):
    r = run_pytest(tmp_path, f"--junitxml={tmp_path / 'junit.xml'}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 2 passed" in r.stdout
    assert "agreement FAIL" in r.stdout or "agreement fail" in r.stdout
    assert "shrunk to" in r.stdout
    replay = [line for line in r.stdout.splitlines() if "replay: pytest" in line]
    assert replay and "test_kernels.py::test_planted" in replay[0] and "--attncheck-seed" in replay[0]
    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    verdicts = {c.get("name"): [x.tag for x in c] for c in cases}
    assert verdicts["test_correct"] == [] and "failure" in verdicts["test_planted"]


def test_k_selects_and_the_options_set_the_budget(tmp_path):
    r = run_pytest(tmp_path, "-k", "correct", "--attncheck-cases", "12", "--attncheck-seed", "5", "-x")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 1 deselected" in r.stdout


def test_x_stops_at_the_first_failure(tmp_path):
    r = run_pytest(tmp_path, "-x", "--attncheck-property", "agreement")
    assert r.returncode == 1
    assert "1 failed, 1 passed" in r.stdout  # test_correct_again did not run


def test_bad_options_are_usage_errors(tmp_path):
    r = run_pytest(tmp_path, "--attncheck-cases", "0")
    assert r.returncode == 4 and "--attncheck-cases must be a positive integer" in r.stderr
