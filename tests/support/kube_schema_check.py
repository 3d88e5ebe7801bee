#!/usr/bin/python3
"""Validates the Kubernetes objects of the mapping against strict v1.30 schemas.

Runs kube_mapping_test's KubeSchema.* test, which writes the Jobs and Services
BuildJob/BuildService make (and the objects the mapping's tests read) to a
temporary directory, then validates every file against its kind's schema in
$KUBE_SCHEMA_DIR (../shared/k8s-schema/v1.30 next to the checkout): job-* with
job-batch-v1.json, service-* with service-v1.json, pod-* with pod-v1.json,
node-* with node-v1.json. Strict schemas reject unknown fields, as the API
server does with fieldValidation=Strict.

Environment: KUBE_MAPPING_TEST (the test binary), KUBE_SCHEMA_DIR. Exits 77
(ctest: skipped) when the schemas or python3-jsonschema are missing.
"""

import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
SCHEMAS = {
    "job": "job-batch-v1.json",
    "service": "service-v1.json",
    "pod": "pod-v1.json",
    "node": "node-v1.json",
}


def main():
    binary = os.environ.get("KUBE_MAPPING_TEST", "")
    schema_dir = os.environ.get("KUBE_SCHEMA_DIR", "")
    if not binary or not os.access(binary, os.X_OK):
        print(f"KUBE_MAPPING_TEST is not an executable: {binary!r}")
        return 1
    if not os.path.isdir(schema_dir):
        print(f"SKIP: no Kubernetes schemas at {schema_dir} (the shared/ checkout "
              "next to the repository)")
        return SKIP
    try:
        import jsonschema  # Debian: python3-jsonschema
    except ImportError:
        print("SKIP: python3-jsonschema is not installed")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="kube-mapping-") as out:
        env = dict(os.environ, KUBE_MAPPING_OUT=out)
        run = subprocess.run([binary, "--gtest_filter=KubeSchema.*"], env=env,
                             capture_output=True, text=True, check=False)
        if run.returncode != 0 or "[  SKIPPED ]" in run.stdout:
            print(run.stdout, run.stderr)
            print("writing the objects failed")
            return 1
        files = sorted(os.listdir(out))
        if not files:
            print("no objects were written")
            return 1
        validators = {}
        failures = 0
        for name in files:
            kind = name.split("-", 1)[0]
            if kind not in SCHEMAS:
                print(f"{name}: no schema for kind {kind!r}")
                failures += 1
                continue
            if kind not in validators:
                with open(os.path.join(schema_dir, SCHEMAS[kind])) as f:
                    validators[kind] = jsonschema.Draft7Validator(json.load(f))
            with open(os.path.join(out, name)) as f:
                obj = json.load(f)
            errors = sorted(validators[kind].iter_errors(obj),
                            key=lambda e: list(e.absolute_path))
            if errors:
                failures += 1
                for e in errors[:10]:
                    path = "/".join(str(p) for p in e.absolute_path)
                    print(f"{name}: {path}: {e.message}")
            else:
                print(f"{name}: valid against {SCHEMAS[kind]}")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
