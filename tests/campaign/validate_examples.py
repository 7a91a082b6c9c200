#!/usr/bin/env python3
"""Validates the campaign examples of examples/campaign/ (its README.md says what each one is).

    validate_examples.py [--attncheck PATH]

Every YAML file there must parse; the GitHub Actions workflow, the Kubernetes Job and the
ClusterFuzzLite configuration must pass the JSON Schemas of campaign_schemas.py for the parts
that matter, and the checks that a schema cannot say: the shard matrix (or the Job's completions and parallelism) is
exactly the N of the `--shard I/N` that the command uses, the merge job comes after the shard job,
the harnesses ClusterFuzzLite's build.sh names are the ones in libfuzzer/. Every `attncheck fuzz`
and `attncheck report merge` command line of the workflow and of the Job may use only the flags
known to shell_commands.py (KNOWN_FUZZ_FLAGS, KNOWN_MERGE_FLAGS), which finds them in the scripts.

With --attncheck PATH (a built `attncheck`), it also runs the shard command of the workflow and of
the Job for every shard index, a built-in kernel (--kernel reference) standing in for --kernel-lib,
with --cases 5 --rounds 1 and no --duration, the corpus and reports in a temporary folder; each must
exit 0 and write its report; then `attncheck report merge` over each set of shards must exit 0.

Prints what it checked; exits 1 naming every failure, 2 when it cannot run at all (a missing
Python module, bad arguments). Needs Debian's python3-yaml and python3-jsonschema.
"""

import argparse
import concurrent.futures
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
    import jsonschema
except ImportError as e:  # pragma: no cover - the environment, not the examples
    print(f"validate_examples.py: error: {e.name} is missing: it needs Debian's python3-yaml and "
          f"python3-jsonschema (apt-get install python3-yaml python3-jsonschema; ci/setup.sh installs them)",
          file=sys.stderr)
    sys.exit(2)

from campaign_schemas import (CAMPAIGN_WORKFLOW_SCHEMA, CFLITE_BUILD_STEP_SCHEMA, CFLITE_PROJECT_SCHEMA,
                              K8S_JOB_SCHEMA, K8S_PVC_SCHEMA, MERGE_JOB_SCHEMA, SHARD_JOB_SCHEMA, WORKFLOW_SCHEMA,
                              cflite_run_step_schema)
from shell_commands import (KNOWN_FUZZ_FLAGS, KNOWN_MERGE_FLAGS, check_fuzz_command, duration_seconds, find_attncheck,
                            parse_flags, shard_command, shard_parts, simple_commands)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "campaign"
WORKFLOW = EXAMPLES / "github-actions.yml"
K8S_JOB = EXAMPLES / "k8s-indexed-job.yaml"
CFLITE = EXAMPLES / "clusterfuzzlite"
CFLITE_PROJECT = CFLITE / ".clusterfuzzlite" / "project.yaml"
CFLITE_DOCKERFILE = CFLITE / ".clusterfuzzlite" / "Dockerfile"
CFLITE_BUILD = CFLITE / ".clusterfuzzlite" / "build.sh"
CFLITE_WORKFLOWS = {  # file -> the run_fuzzers mode it must use
    CFLITE / ".github" / "workflows" / "cflite_pr.yml": "code-change",
    CFLITE / ".github" / "workflows" / "cflite_batch.yml": "batch",
}
LIBFUZZER = ROOT / "libfuzzer"

# ---------------------------------------------------------------------------------------------
# Reporting.

class Checks:
    def __init__(self):
        self.passed = 0
        self.failures = []

    def ok(self, what):
        self.passed += 1
        print(f"ok    {what}")

    def fail(self, what, why):
        self.failures.append(f"{what}: {why}")
        print(f"FAIL  {what}: {why}")

    def expect(self, condition, what, why):
        if condition:
            self.ok(what)
        else:
            self.fail(what, why)
        return condition

    def schema(self, instance, schema, what):
        validator = jsonschema.Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        if not errors:
            self.ok(what)
            return True
        for e in errors:
            where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
            self.fail(what, f"{where}: {e.message}")
        return False


def rel(path):
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


def load_yaml(path, checks, many=False):
    try:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None] if many else yaml.safe_load(f)
    except FileNotFoundError:
        checks.fail(rel(path), "missing")
        return None
    except yaml.YAMLError as e:
        checks.fail(rel(path), f"does not parse as YAML: {e}")
        return None
    checks.ok(f"{rel(path)} parses")
    return docs


def workflow_on(wf):
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean true.
    if isinstance(wf, dict) and True in wf and "on" not in wf:
        wf = dict(wf)
        wf["on"] = wf.pop(True)
    return wf


# ---------------------------------------------------------------------------------------------
# The GitHub Actions workflow.

def steps_using(job, prefix):
    return [s for s in job.get("steps", []) if isinstance(s, dict) and str(s.get("uses", "")).startswith(prefix)]


def listed_paths(value):
    return [p.strip() for p in str(value or "").splitlines() if p.strip()]


def same_path(a, b):
    return a.rstrip("/") == b.rstrip("/")


def check_workflow(checks):
    wf = load_yaml(WORKFLOW, checks)
    if wf is None:
        return None
    wf = workflow_on(wf)
    name = rel(WORKFLOW)
    if not checks.schema(wf, CAMPAIGN_WORKFLOW_SCHEMA, f"{name}: workflow schema (on: schedule + workflow_dispatch, jobs with runs-on and steps)"):
        return None
    jobs = wf["jobs"]

    fuzz, merges = [], []  # (job id, words)
    for job_id, job in jobs.items():
        for step in job["steps"]:
            if "run" not in step:
                continue
            try:
                commands = simple_commands(step["run"])
            except ValueError as e:
                checks.fail(f"{name}: job {job_id}", str(e))
                continue
            fuzz += [(job_id, w) for w in find_attncheck(commands, ("fuzz",))]
            merges += [(job_id, w) for w in find_attncheck(commands, ("report", "merge"))]
            # The ci/ scripts it runs are attncheck's.
            for words in commands:
                for w in words:
                    m = re.search(r"(?:^|/)ci/([\w.-]+\.sh)$", w)
                    if m:
                        checks.expect((ROOT / "ci" / m.group(1)).is_file(), f"{name}: job {job_id} runs ci/{m.group(1)}",
                                      f"attncheck has no ci/{m.group(1)}")

    picked = shard_command([(job_id, words, None) for job_id, words in fuzz], name, "job", checks)
    if picked is None:
        return None
    shard_job_id, flags, _, what = picked
    d = check_fuzz_command(flags, what, checks)
    index, n = shard_parts(d.get("--shard"))
    if not checks.expect(n is not None and re.fullmatch(r"\$\{\{\s*matrix\.shard\s*\}\}", index or ""),
                         f"{what}: --shard {d.get('--shard')}", "expected --shard ${{ matrix.shard }}/N"):
        return None
    checks.expect("matrix." not in d.get("--seed", ""), f"{what}: one --seed for every shard ({d.get('--seed')})",
                  "the seed must not depend on the matrix: the shards of a campaign share it")
    for flag in ("--json", "--junit"):
        if flag in d:
            checks.expect(re.search(r"\$\{\{\s*matrix\.shard\s*\}\}", d[flag]) is not None,
                          f"{what}: {flag} {d[flag]} names the shard", "each shard needs a file of its own")

    shard_job = jobs[shard_job_id]
    if checks.schema(shard_job, SHARD_JOB_SCHEMA, f"{name}: job {shard_job_id}: shard matrix schema"):
        matrix = shard_job["strategy"]["matrix"]["shard"]
        checks.expect(sorted(matrix) == list(range(n)), f"{name}: matrix.shard {matrix} is 0..{n - 1}, as --shard .../{n} needs",
                      f"matrix.shard is {matrix}, but --shard ${{{{ matrix.shard }}}}/{n} needs exactly {list(range(n))}")

    # Its report and corpus are uploaded, also when the shard failed; its corpus is restored.
    uploads = [s for s in steps_using(shard_job, "actions/upload-artifact@")
               if any(same_path(p, d["--json"]) for p in listed_paths(s.get("with", {}).get("path")))]
    if checks.expect(uploads, f"{name}: job {shard_job_id} uploads {d['--json']}", "no actions/upload-artifact step with that path"):
        checks.expect("always()" in str(uploads[0].get("if", "")), f"{name}: job {shard_job_id} uploads it also after a failure",
                      "the upload step needs if: always()")
        checks.expect(any(same_path(p, d["--corpus"]) for p in listed_paths(uploads[0].get("with", {}).get("path"))),
                      f"{name}: job {shard_job_id} uploads the corpus {d['--corpus']}", "the upload step does not name the corpus")
    restores = [s for s in steps_using(shard_job, "actions/cache")
                if any(same_path(p, d["--corpus"]) for p in listed_paths(s.get("with", {}).get("path")))]
    checks.expect(restores, f"{name}: job {shard_job_id} restores the corpus {d['--corpus']} from the cache",
                  "no actions/cache step with that path")

    # The merge job.
    if not checks.expect(len(merges) == 1, f"{name}: one `attncheck report merge` command", f"found {len(merges)}"):
        return None
    merge_job_id, merge_words = merges[0]
    mwhat = f"{name}: job {merge_job_id}: attncheck report merge"
    mflags = parse_flags(merge_words, KNOWN_MERGE_FLAGS, mwhat, checks, positionals_allowed=True)
    if mflags is not None:
        inputs = [v for f, v in mflags if f is None]
        checks.ok(f"{mwhat}: flags among the known ones")
        reports = [re.sub(r"\$\{\{\s*matrix\.shard\s*\}\}", str(i), d["--json"]) for i in range(n)]
        checks.expect(inputs and all(any(fnmatch.fnmatch(Path(r).name, Path(p).name) for p in inputs) for r in reports),
                      f"{mwhat}: {' '.join(inputs)} takes every shard's report ({', '.join(reports)})",
                      "the merge's inputs do not match the shards' --json files")
    merge_job = jobs[merge_job_id]
    if checks.schema(merge_job, MERGE_JOB_SCHEMA, f"{name}: job {merge_job_id}: merge job schema (needs, if: always())"):
        needs = merge_job["needs"] if isinstance(merge_job["needs"], list) else [merge_job["needs"]]
        checks.expect(shard_job_id in needs, f"{name}: job {merge_job_id} needs job {shard_job_id}",
                      f"needs is {needs}")
    checks.expect(steps_using(merge_job, "actions/download-artifact@"), f"{name}: job {merge_job_id} downloads the shards' artifacts",
                  "no actions/download-artifact step")
    return {"source": "workflow", "n": n, "flags": flags}


# ---------------------------------------------------------------------------------------------
# The Kubernetes Job.

def check_k8s(checks):
    docs = load_yaml(K8S_JOB, checks, many=True)
    if docs is None:
        return None
    name = rel(K8S_JOB)
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Job"]
    if not checks.expect(len(jobs) == 1, f"{name}: one Job", f"found {len(jobs)}"):
        return None
    job = jobs[0]
    if not checks.schema(job, K8S_JOB_SCHEMA, f"{name}: Job schema (batch/v1, Indexed, restartPolicy Never, ...)"):
        return None
    pod = job["spec"]["template"]["spec"]

    fuzz = []  # (container name, words, the container's shell commands)
    for c in pod["containers"]:
        argv = list(c.get("command", [])) + list(c.get("args", []))
        direct = find_attncheck([argv], ("fuzz",))
        if direct:  # exec form: ["attncheck", "fuzz", ...]
            fuzz += [(c["name"], w, [argv]) for w in direct]
            continue
        for text in argv:
            try:
                commands = simple_commands(text)
            except ValueError as e:
                checks.fail(f"{name}: container {c['name']}", str(e))
                continue
            fuzz += [(c["name"], w, commands) for w in find_attncheck(commands, ("fuzz",))]
    picked = shard_command(fuzz, name, "container", checks)
    if picked is None:
        return None
    container_name, flags, commands, what = picked
    d = check_fuzz_command(flags, what, checks)
    index, n = shard_parts(d.get("--shard"))
    if not checks.expect(n is not None and index in ("$JOB_COMPLETION_INDEX", "${JOB_COMPLETION_INDEX}"),
                         f"{what}: --shard {d.get('--shard')}", "expected --shard $JOB_COMPLETION_INDEX/N"):
        return None
    spec = job["spec"]
    checks.expect(spec["completions"] == n and spec["parallelism"] == n,
                  f"{name}: completions {spec['completions']} == parallelism {spec['parallelism']} == N of --shard .../{n}",
                  f"completions {spec['completions']} and parallelism {spec['parallelism']} must both be {n}, the N of --shard")
    checks.expect("JOB_COMPLETION_INDEX" not in d.get("--seed", ""), f"{what}: one --seed for every shard ({d.get('--seed')})",
                  "the seed must not depend on the index: the shards of a campaign share it")
    for flag in ("--json", "--junit"):
        if flag in d:
            checks.expect("JOB_COMPLETION_INDEX" in d[flag], f"{what}: {flag} {d[flag]} names the shard",
                          "each shard needs a file of its own")
    if "--duration" in d:
        secs = duration_seconds(d["--duration"])
        checks.expect(secs is not None and secs < spec["activeDeadlineSeconds"],
                      f"{what}: --duration {d['--duration']} ends before activeDeadlineSeconds {spec['activeDeadlineSeconds']}",
                      "the Job's deadline would cut the campaign short")

    # The reports and the corpus live on the claim the pods share.
    container = next(c for c in pod["containers"] if c["name"] == container_name)
    claims = {v["name"]: v["persistentVolumeClaim"].get("claimName") for v in pod["volumes"]
              if isinstance(v.get("persistentVolumeClaim"), dict)}
    shared = [m["mountPath"].rstrip("/") for m in container["volumeMounts"] if m["name"] in claims]
    if not checks.expect(shared, f"{name}: container {container_name} mounts a PersistentVolumeClaim", "no claim is mounted"):
        return None

    def on_shared(path):
        return any(path == m or path.startswith(m + "/") for m in shared)

    checks.expect(on_shared(d["--json"]), f"{what}: --json {d['--json']} is on the shared volume ({', '.join(shared)})",
                  "the merge could not find the report after the pod is gone")
    corpus = d["--corpus"].rstrip("/")
    if on_shared(corpus):
        checks.ok(f"{what}: --corpus {corpus} is on the shared volume")
    else:
        # A local copy of the shared corpus: copied in before the run, its entries copied back
        # to the shared volume after it.
        def is_corpus(p):
            p = p.rstrip("/")
            return p in (corpus, corpus + "/.") or p.startswith(corpus + "/")

        def copy_to(words, dst_test):
            paths = [w for w in words[1:] if not w.startswith("-")]
            return (bool(words) and os.path.basename(words[0]) in ("cp", "mv", "rsync") and len(paths) >= 2
                    and dst_test(paths[-1]))

        run_at = next((k for k, w in enumerate(commands) if find_attncheck([w], ("fuzz",))), 0)
        before, after = commands[:run_at], commands[run_at + 1:]
        copied_in = any(copy_to(w, is_corpus) and any(on_shared(p) for p in w[1:-1]) for w in before)
        copied_back = (any(is_corpus(p) for w in after for p in w)
                       and any(copy_to(w, on_shared) for w in after))
        checks.expect(copied_in and copied_back,
                      f"{what}: --corpus {corpus} is copied from the shared volume before the run and back after it",
                      "the corpus is neither on the shared volume nor copied from it before the run and back after it")

    pvcs = [x for x in docs if isinstance(x, dict) and x.get("kind") == "PersistentVolumeClaim"]
    for pvc in pvcs:
        checks.schema(pvc, K8S_PVC_SCHEMA, f"{name}: PersistentVolumeClaim {pvc.get('metadata', {}).get('name')} schema (ReadWriteMany)")
    if pvcs:
        names = {p["metadata"]["name"] for p in pvcs if isinstance(p.get("metadata"), dict)}
        for claim in claims.values():
            checks.expect(claim in names, f"{name}: claim {claim} is the PersistentVolumeClaim of the file",
                          f"the file defines {sorted(names)}")
    return {"source": "k8s", "n": n, "flags": flags}


# ---------------------------------------------------------------------------------------------
# ClusterFuzzLite.

def libfuzzer_harnesses():
    return sorted(p.stem for p in LIBFUZZER.glob("fuzz_*.cpp") if "LLVMFuzzerTestOneInput" in p.read_text(encoding="utf-8"))


def check_clusterfuzzlite(checks):
    project = load_yaml(CFLITE_PROJECT, checks)
    if project is not None:
        checks.schema(project, CFLITE_PROJECT_SCHEMA, f"{rel(CFLITE_PROJECT)}: schema (language: c++)")

    try:
        dockerfile = CFLITE_DOCKERFILE.read_text(encoding="utf-8")
        froms = re.findall(r"^\s*FROM\s+(\S+)", dockerfile, re.M | re.I)
        checks.expect(froms and froms[0].split(":")[0].split("@")[0] == "gcr.io/oss-fuzz-base/base-builder",
                      f"{rel(CFLITE_DOCKERFILE)}: FROM gcr.io/oss-fuzz-base/base-builder", f"FROM {froms}")
        checks.expect(re.search(r"^\s*COPY\s+\S*build\.sh\s+\$SRC/?\s*$", dockerfile, re.M | re.I) is not None,
                      f"{rel(CFLITE_DOCKERFILE)}: copies build.sh to $SRC/", "no COPY of build.sh to $SRC/")
    except FileNotFoundError:
        checks.fail(rel(CFLITE_DOCKERFILE), "missing")

    try:
        build = CFLITE_BUILD.read_text(encoding="utf-8")
    except FileNotFoundError:
        checks.fail(rel(CFLITE_BUILD), "missing")
        build = None
    if build is not None:
        what = rel(CFLITE_BUILD)
        checks.expect(os.access(CFLITE_BUILD, os.X_OK), f"{what}: executable", "chmod +x it")
        m = re.search(r"^\s*harnesses=\(([^)]*)\)", build, re.M)
        existing = libfuzzer_harnesses()
        if checks.expect(m is not None, f"{what}: has its harnesses=(...) list", "no harnesses=(...) line"):
            listed = m.group(1).split()
            unknown = sorted(set(listed) - set(existing))
            checks.expect(listed and not unknown, f"{what}: builds {' '.join(listed)}, harnesses of libfuzzer/",
                          f"{' '.join(unknown) or 'nothing'}: not a harness of libfuzzer/ (there: {' '.join(existing)})")
            missing = sorted(set(existing) - set(listed))
            checks.expect(not missing, f"{what}: builds every harness of libfuzzer/",
                          f"libfuzzer/ also has {' '.join(missing)}: add it to harnesses=(...)")
            named = sorted(set(re.findall(r"\bfuzz_\w+", build)) - set(existing))
            checks.expect(not named, f"{what}: names no other fuzz_* target", f"it names {' '.join(named)}")
            for h in listed:
                short = h[len("fuzz_"):]
                checks.expect((LIBFUZZER / f"{short}.dict").is_file() and (LIBFUZZER / "corpus" / short).is_dir(),
                              f"{what}: libfuzzer/{short}.dict and libfuzzer/corpus/{short}/ exist for {h}",
                              "build.sh copies them")
            cmake = (LIBFUZZER / "CMakeLists.txt").read_text(encoding="utf-8")
            fm = re.search(r"foreach\(target\s+([^)]*)\)", cmake)
            if fm:
                cmake_targets = sorted(f"fuzz_{t}" for t in fm.group(1).split())
                checks.expect(sorted(listed) == cmake_targets, f"{what}: the harnesses of libfuzzer/CMakeLists.txt",
                              f"CMakeLists.txt builds {' '.join(cmake_targets)}")
        for var in ("$CXX", "$CXXFLAGS", "$LIB_FUZZING_ENGINE", "$OUT"):
            checks.expect(var in build, f"{what}: uses {var}", f"ClusterFuzzLite's {var} is not used")

    for path, mode in CFLITE_WORKFLOWS.items():
        wf = load_yaml(path, checks)
        if wf is None:
            continue
        wf = workflow_on(wf)
        name = rel(path)
        if not checks.schema(wf, WORKFLOW_SCHEMA, f"{name}: workflow schema"):
            continue
        trigger = "pull_request" if mode == "code-change" else "schedule"
        on = wf["on"]
        checks.expect(trigger in (on if isinstance(on, (dict, list)) else [on]), f"{name}: runs on {trigger}",
                      f"on: {on}")
        for job_id, job in wf["jobs"].items():
            builds = steps_using(job, "google/clusterfuzzlite/actions/build_fuzzers")
            runs = steps_using(job, "google/clusterfuzzlite/actions/run_fuzzers")
            if not checks.expect(len(builds) == 1 and len(runs) == 1, f"{name}: job {job_id} builds and runs the fuzzers",
                                 f"{len(builds)} build_fuzzers and {len(runs)} run_fuzzers steps"):
                continue
            steps = job["steps"]
            checks.expect(steps.index(builds[0]) < steps.index(runs[0]), f"{name}: job {job_id}: build_fuzzers before run_fuzzers",
                          "run_fuzzers comes first")
            checks.schema(builds[0], CFLITE_BUILD_STEP_SCHEMA, f"{name}: job {job_id}: build_fuzzers@v1 and its inputs")
            checks.schema(runs[0], cflite_run_step_schema(mode), f"{name}: job {job_id}: run_fuzzers@v1 and its inputs (mode {mode})")
            matrix = job.get("strategy", {}).get("matrix", {})
            for step, label in ((builds[0], "build_fuzzers"), (runs[0], "run_fuzzers")):
                s = str(step.get("with", {}).get("sanitizer", ""))
                m = re.fullmatch(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", s)
                values = matrix.get(m.group(1), []) if m else [s]
                checks.expect("address" in values, f"{name}: job {job_id}: {label} with sanitizer address",
                              f"sanitizer {s} ({values})")


# ---------------------------------------------------------------------------------------------
# Every YAML file of the examples parses (those without a schema above too).

def check_all_yaml_parse(checks, validated):
    for path in sorted(list(EXAMPLES.rglob("*.yml")) + list(EXAMPLES.rglob("*.yaml"))):
        if path in validated:
            continue
        load_yaml(path, checks, many=True)


# ---------------------------------------------------------------------------------------------
# Running the shard commands.

def flags_of_help(attncheck, args):
    r = subprocess.run([attncheck, *args, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip()
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", r.stdout)), None


def tail(text, lines=25):
    return "\n".join(("      " + l) for l in text.strip().splitlines()[-lines:])


def shard_argv(attncheck, flags, i, n, work):
    """The shard's command with a built-in kernel, 5 cases, one round, its files in `work`."""
    argv = [attncheck, "fuzz", "--kernel", "reference", "--cases", "5", "--rounds", "1"]
    for flag, value in flags:
        if flag in ("--kernel-lib", "--symbol", "--kernel", "--duration", "--checkpoint-every", "--rounds", "--cases"):
            continue
        if flag == "--seed":
            value = "20240611"
        elif flag == "--shard":
            value = f"{i}/{n}"
        elif flag == "--corpus":
            value = str(work / "corpus")
        elif flag == "--json":
            value = str(work / f"shard-{i}.json")
        elif flag == "--junit":
            value = str(work / f"shard-{i}.xml")
        elif value is not None and ("$" in value or "${{" in value):
            raise ValueError(f"{flag} {value}: cannot run a value that the CI system fills in")
        argv += [flag] if value is None else [flag, value]
    return argv


def run(argv, timeout):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the shards run side by side
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or "", e.stderr or ""


def run_campaigns(checks, attncheck, campaigns):
    attncheck = str(Path(attncheck).resolve())
    if not checks.expect(os.access(attncheck, os.X_OK), f"attncheck {attncheck} is executable", "not found or not executable"):
        return
    fuzz_help, err = flags_of_help(attncheck, ["fuzz"])
    if not checks.expect(fuzz_help is not None, "attncheck fuzz --help", f"failed: {err}"):
        return
    wanted = {f for c in campaigns for f, _ in c["flags"]} | {"--kernel", "--cases", "--rounds"}
    missing = sorted(wanted - fuzz_help)
    if not checks.expect(not missing, f"attncheck fuzz offers {' '.join(sorted(wanted))}",
                         f"this attncheck has no {' '.join(missing)} (not in `attncheck fuzz --help`): "
                         "it was built without the campaign flags the examples use"):
        return
    merge_help, err = flags_of_help(attncheck, ["report", "merge"])
    if not checks.expect(merge_help is not None and {"--json", "--junit"} <= merge_help, "attncheck report merge --help",
                         f"this attncheck has no `report merge` with --json and --junit: {err or 'flags missing'}"):
        return

    with tempfile.TemporaryDirectory(prefix="attncheck-campaign-") as tmp:
        jobs = []
        for c in campaigns:
            work = Path(tmp) / c["source"]
            work.mkdir()
            for i in range(c["n"]):
                try:
                    jobs.append((c, i, work, shard_argv(attncheck, c["flags"], i, c["n"], work)))
                except ValueError as e:
                    checks.fail(f"{c['source']}: shard {i}/{c['n']}", str(e))
                    return
        # The shards of a campaign run side by side, as they would on their machines (one thread each).
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda j: run(j[3], 240), jobs))
        for (c, i, work, argv), (rc, out, err) in zip(jobs, results):
            what = f"{c['source']}: shard {i}/{c['n']}: {shlex.join(argv[1:])}"
            report = work / f"shard-{i}.json"
            if rc != 0:
                checks.fail(what, ("timed out after 240 s" if rc is None else f"exit {rc}, expected 0") +
                            f"\n{tail(err + out)}")
                continue
            try:
                j = json.loads(report.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                checks.fail(what, f"exit 0, but no readable report {report.name}: {e}")
                continue
            problems = []
            if j.get("passed") is not True:
                problems.append(f"the report says passed = {j.get('passed')!r}")
            camp = j.get("campaign")
            if isinstance(camp, dict):
                shard = camp.get("shard", {})
                if shard.get("index") != i or shard.get("count") != c["n"]:
                    problems.append(f"the report's campaign.shard is {shard}, expected index {i}, count {c['n']}")
                if camp.get("complete") is False:
                    problems.append(f"the report's campaign did not complete (stopped by {camp.get('stopped_by')})")
            if "--junit" in argv and not (work / f"shard-{i}.xml").is_file():
                problems.append("no --junit file")
            checks.expect(not problems, f"{what}: exit 0, report written", "; ".join(problems))

        for c in campaigns:
            work = Path(tmp) / c["source"]
            reports = [str(work / f"shard-{i}.json") for i in range(c["n"])]
            if not all(Path(r).is_file() for r in reports):
                checks.fail(f"{c['source']}: attncheck report merge", "not run: a shard wrote no report")
                continue
            argv = [attncheck, "report", "merge", *reports, "--json", str(work / "merged.json"),
                    "--junit", str(work / "merged.xml")]
            rc, out, err = run(argv, 120)
            what = f"{c['source']}: attncheck report merge of {c['n']} shards"
            if rc != 0:
                checks.fail(what, ("timed out" if rc is None else f"exit {rc}, expected 0") + f"\n{tail(err + out)}")
                continue
            try:
                merged = json.loads((work / "merged.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                checks.fail(what, f"exit 0, but no readable merged report: {e}")
                continue
            checks.expect(merged.get("passed", True) is True and not merged.get("shards_missing"),
                          f"{what}: exit 0, all passed", f"passed {merged.get('passed')!r}, shards missing {merged.get('shards_missing')}")


# ---------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attncheck", metavar="PATH",
                        help="a built attncheck: also run every shard command of the workflow and the Job, and merge them")
    args = parser.parse_args()

    checks = Checks()
    print(f"validate_examples: {rel(EXAMPLES)}")
    campaigns = [c for c in (check_workflow(checks), check_k8s(checks)) if c]
    check_clusterfuzzlite(checks)
    check_all_yaml_parse(checks, {WORKFLOW, K8S_JOB, CFLITE_PROJECT, *CFLITE_WORKFLOWS})
    if args.attncheck:
        if len(campaigns) < 2:
            checks.fail("running the shard commands", "not run: the workflow or the Job did not pass the checks above")
        else:
            run_campaigns(checks, args.attncheck, campaigns)

    if checks.failures:
        print(f"\nvalidate_examples: FAILED: {len(checks.failures)} of {checks.passed + len(checks.failures)} checks")
        for f in checks.failures:
            print(f"  - {f.splitlines()[0]}")
        return 1
    print(f"\nvalidate_examples: all {checks.passed} checks passed"
          + ("" if args.attncheck else " (the shard commands not run: no --attncheck)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
