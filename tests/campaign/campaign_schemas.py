"""The JSON Schemas of the campaign examples' parts that matter (validate_examples.py checks them)."""

# ---------------------------------------------------------------------------------------------
# JSON Schemas of the parts that matter.

STEP_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "id": {"type": "string"},
        "if": {"type": ["string", "boolean"]},
        "uses": {"type": "string", "pattern": r"^[\w.-]+/[\w./-]+@[\w.-]+$"},
        "run": {"type": "string", "minLength": 1},
        "with": {"type": "object"},
    },
    "oneOf": [{"required": ["uses"]}, {"required": ["run"]}],  # one of them, never both
}

JOB_SCHEMA = {
    "type": "object",
    "required": ["runs-on", "steps"],
    "properties": {
        "runs-on": {"anyOf": [{"type": "string", "minLength": 1},
                               {"type": "array", "minItems": 1, "items": {"type": "string"}}]},
        "steps": {"type": "array", "minItems": 1, "items": STEP_SCHEMA},
        "needs": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "if": {"type": ["string", "boolean"]},
        "strategy": {"type": "object", "properties": {
            "matrix": {"type": "object"}, "fail-fast": {"type": "boolean"}}},
        "timeout-minutes": {"type": ["integer", "string"]},
    },
}

WORKFLOW_SCHEMA = {
    "type": "object",
    "required": ["name", "on", "jobs"],
    "properties": {
        "name": {"type": "string"},
        "on": {"type": ["object", "string", "array"]},
        "jobs": {"type": "object", "minProperties": 1, "additionalProperties": JOB_SCHEMA},
    },
}

CRON = {"type": "string", "pattern": r"^\s*\S+\s+\S+\s+\S+\s+\S+\s+\S+\s*$"}
SCHEDULE = {"type": "array", "minItems": 1,
            "items": {"type": "object", "required": ["cron"], "properties": {"cron": CRON}}}

# The campaign workflow: nightly, and by hand.
CAMPAIGN_WORKFLOW_SCHEMA = {
    "allOf": [WORKFLOW_SCHEMA],
    "properties": {"on": {"type": "object", "required": ["schedule", "workflow_dispatch"],
                          "properties": {"schedule": SCHEDULE}}},
}

# The shard job: a matrix of shard indexes, and no cancelling of the others when one fails.
SHARD_JOB_SCHEMA = {
    "type": "object",
    "required": ["strategy"],
    "properties": {"strategy": {
        "type": "object",
        "required": ["matrix", "fail-fast"],
        "properties": {
            "fail-fast": {"const": False},
            "matrix": {"type": "object", "required": ["shard"], "properties": {
                "shard": {"type": "array", "minItems": 1, "uniqueItems": True,
                          "items": {"type": "integer", "minimum": 0}}}},
        },
    }},
}

# The merge job: after the shards, whatever became of them.
MERGE_JOB_SCHEMA = {
    "type": "object",
    "required": ["needs", "if"],
    "properties": {"if": {"type": "string", "pattern": r"always\(\)"}},
}

K8S_JOB_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "batch/v1"},
        "kind": {"const": "Job"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["completionMode", "completions", "parallelism", "backoffLimit",
                         "activeDeadlineSeconds", "template"],
            "properties": {
                "completionMode": {"const": "Indexed"},
                "completions": {"type": "integer", "minimum": 1},
                "parallelism": {"type": "integer", "minimum": 1},
                "backoffLimit": {"type": "integer", "minimum": 0},
                "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                "template": {"type": "object", "required": ["spec"], "properties": {"spec": {
                    "type": "object",
                    "required": ["restartPolicy", "containers", "volumes"],
                    "properties": {
                        "restartPolicy": {"const": "Never"},
                        "containers": {"type": "array", "minItems": 1, "items": {
                            "type": "object",
                            "required": ["name", "image", "resources", "volumeMounts"],
                            "properties": {
                                "command": {"type": "array", "items": {"type": "string"}},
                                "args": {"type": "array", "items": {"type": "string"}},
                                "resources": {"type": "object", "required": ["requests", "limits"]},
                                "volumeMounts": {"type": "array", "minItems": 1, "items": {
                                    "type": "object", "required": ["name", "mountPath"]}},
                            },
                        }},
                        "volumes": {"type": "array", "minItems": 1, "items": {
                            "type": "object", "required": ["name"]}},
                    },
                }}},
            },
        },
    },
}

K8S_PVC_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "v1"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {"type": "object", "required": ["accessModes", "resources"], "properties": {
            "accessModes": {"type": "array", "contains": {"const": "ReadWriteMany"}}}},
    },
}

CFLITE_PROJECT_SCHEMA = {
    "type": "object",
    "required": ["language"],
    "properties": {"language": {"const": "c++"}},
}

CFLITE_BUILD_STEP_SCHEMA = {
    "type": "object",
    "required": ["uses", "with"],
    "properties": {
        "uses": {"const": "google/clusterfuzzlite/actions/build_fuzzers@v1"},
        "with": {"type": "object", "required": ["language", "sanitizer"],
                 "properties": {"language": {"const": "c++"}, "sanitizer": {"type": "string"}}},
    },
}


def cflite_run_step_schema(mode):
    return {
        "type": "object",
        "required": ["uses", "with"],
        "properties": {
            "uses": {"const": "google/clusterfuzzlite/actions/run_fuzzers@v1"},
            "with": {"type": "object", "required": ["github-token", "fuzz-seconds", "mode", "sanitizer"],
                     "properties": {
                         "github-token": {"type": "string", "pattern": r"secrets\.GITHUB_TOKEN"},
                         "fuzz-seconds": {"anyOf": [{"type": "integer", "minimum": 1},
                                                    {"type": "string", "pattern": r"^\d+$"}]},
                         "mode": {"const": mode},
                         "sanitizer": {"type": "string"}}},
        },
    }
