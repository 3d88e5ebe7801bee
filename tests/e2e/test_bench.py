"""The jobs page with 100,000 jobs in the tenant (marked `bench`; select it with -m bench).

A stack without the sim backend (jobs stay queued; the scheduler's interval is an hour) gets
E2E_BENCH_JOBS (default 100,000) jobs through `POST /v1/tenants/demo/jobs:batchSubmit`, 1,000
a call, with the submit rate limit raised; 20 of them, not the newest, are held (the filter step looks for
them), and the jobs table is vacuumed and analyzed. Then bench_jobs_page.mjs measures the page in the browser and prints BENCH_JSON; its
limits: interactive <= 1.5 s, a sort or filter change <= 300 ms, no scroll frame over 50 ms; after
the scroll the Tab key must visit the rows in order.
The built bundle's gzipped size comes from `npm run size` in web/.

    TRAINYARD_BIN=build/release/bin/trainyard /usr/bin/python3 -m pytest -q -s -m bench tests/e2e
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e_stack import E2E, REPO, rest, start
from test_console import node_ready

JOBS = int(os.environ.get("E2E_BENCH_JOBS", "100000"))
BATCH = 1000
RUNS = int(os.environ.get("E2E_BENCH_RUNS", "3"))
# A margin over the limits (E2E_BENCH_SLACK, default none; CI uses none), for a machine that
# is busy with something else: the medians printed are the figures.
SLACK = float(os.environ.get("E2E_BENCH_SLACK", "1"))
# Frame gaps are whole vsyncs (16.7 ms at 60 Hz) give or take 0.2 ms of timer jitter: a gap of
# three vsyncs measures 49.9 to 50.1 ms and meets "no frame over 50 ms"; four (66.7) do not.
TOLERANCE = {"scrollMaxFrameMs": 0.5}

pytestmark = [pytest.mark.bench,
              pytest.mark.skipif(node_ready() is not None, reason=node_ready() or "")]


def job(i: int) -> dict:
    return {"job": {"displayName": f"bench-{i:06d}",
                    "labels": {"bench": "jobs-page", "shard": str(i % 10)},
                    "spec": {"project": "default", "queue": "default", "workers": 1,
                             "jobSet": f"set-{i // 1000:03d}",
                             "resources": {"gpus": 1 + i % 8, "gpuModel": "H100",
                                           "cpuMillis": "4000", "memoryBytes": "17179869184"},
                             "command": ["python3", "train.py"]}},
            "clientRequestId": f"bench-{i}"}


def seed(base: str, token: str) -> float:
    def batch(start_index: int) -> int:
        body = {"requests": [job(i) for i in range(start_index, min(JOBS, start_index + BATCH))]}
        status, answer = rest(base, token, "POST", "/v1/tenants/demo/jobs:batchSubmit", body,
                              timeout=300)
        assert status == 200, f"batchSubmit at {start_index}: {status} {answer}"
        return len(answer["responses"])

    started = time.time()
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = sum(pool.map(batch, range(0, JOBS, BATCH)))
    assert done == JOBS
    return time.time() - started


def bundle_gzip_bytes() -> int:
    p = subprocess.run(["npm", "run", "--silent", "size"], cwd=str(REPO / "web"),
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"total gzip: (\d+) B", p.stdout)
    assert m, f"npm run size printed no total:\n{p.stdout}\n{p.stderr}"
    return int(m.group(1))


def test_jobs_page_with_100k_jobs():
    started = time.time()
    s, env = start(sim=False, extra=["--default_submit_rate=1000000",
                                     "--default_submit_burst=1000000",
                                     "--schedule_interval=1h"])
    try:
        base, token = env["E2E_BASE_URL"], env["E2E_TOKEN_DEMO"]
        seed_s = seed(base, token)
        # Independent count: ListJobs pages through the tenant (the API's own answer).
        status, first = rest(base, token, "GET", "/v1/tenants/demo/jobs?pageSize=1000")
        assert status == 200, first
        assert len(first["jobs"]) == 1000
        # Held jobs from the middle of the first thousand: the page's first screen (newest first)
        # shows none of them, so the filter step cannot pass before the filtered page arrives.
        for j in first["jobs"][500:520]:
            status, body = rest(base, token, "POST", f"/v1/{j['name']}:hold", {"reason": "bench"})
            assert status == 200, body
        # A database in its steady state, as a long-lived one is: statistics for the planner and
        # the visibility map set. Otherwise autovacuum's first pass over the 100,000 new rows and
        # their indexes takes a core while the first runs measure frame times.
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", s.postgres_url,
                        "-c", "VACUUM (ANALYZE) jobs"], check=True, timeout=300)
        bench_env = dict(os.environ)
        bench_env.update(env)
        bench_env["E2E_BENCH_JOBS"] = str(JOBS)
        # Three runs over the same 100,000 jobs; the limits hold for the medians (one run's
        # single slow frame on a 2-core machine is noise, three in a row are not).
        runs = []
        for _ in range(RUNS):
            p = subprocess.run(["node", str(E2E / "bench_jobs_page.mjs")], capture_output=True,
                               text=True, env=bench_env, timeout=300, cwd=str(E2E))
            print(p.stdout)
            print(p.stderr)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
            assert line, f"no BENCH_JSON:\n{p.stdout}\n{p.stderr}"
            runs.append(json.loads(line[len("BENCH_JSON "):]))
        result = {k: v for k, v in runs[-1].items() if not isinstance(v, (int, float))}
        for key in ("loadMs", "interactiveMs", "sortMs", "sortApiMs", "sortNameMs", "sortNameApiMs",
                    "filterMs", "filterApiMs",
                    "scrollMaxFrameMs", "scrollP95FrameMs"):
            values = sorted(r[key] for r in runs if isinstance(r.get(key), (int, float)))
            assert values, f"no {key} measured"
            result[key] = values[len(values) // 2]
            result[key + "Runs"] = [r.get(key) for r in runs]
        limits = runs[-1]["limits"]
        result["limits"] = limits
        result["slack"] = SLACK
        result["overLimit"] = [f"{k} {result[k]} > {v}" for k, v in limits.items()
                               if result[k] > v + TOLERANCE.get(k, 0)]
        result["broken"] = [f"{k} {result[k]} > {v} x {SLACK}" for k, v in limits.items()
                            if result[k] > v * SLACK + TOLERANCE.get(k, 0)]
        result["seedSeconds"] = round(seed_s, 1)
        result["seedJobsPerSecond"] = round(JOBS / seed_s)
        result["bundleGzipBytes"] = bundle_gzip_bytes()
        result["testSeconds"] = round(time.time() - started, 1)
        print("BENCH_RESULT " + json.dumps(result))
        out = os.environ.get("E2E_BENCH_OUT")
        if out:
            with open(out, "w") as f:
                json.dump(result, f, indent=2)
        # The Tab key visits the rows in order after the scroll (bench_jobs_page.mjs).
        for r in runs:
            t = r.get("tabRowIndexes") or []
            assert t and all(x == t[0] + i // 2 for i, x in enumerate(t)), f"Tab after the scroll: rows {t}"
        assert not result["broken"], f"limits broken (medians of {RUNS} runs): {result['broken']}"
    finally:
        s.stop()
