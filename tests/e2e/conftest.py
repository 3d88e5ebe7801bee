"""tests/e2e: e2e_stack.py (next to this file) is importable; the `bench` mark, whose tests
run only when selected (`-m bench`)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config):
    config.addinivalue_line("markers", "bench: the jobs-page benchmark with 100,000 jobs (slow)")


def pytest_collection_modifyitems(config, items):
    if "bench" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="the benchmark runs with -m bench")
    for item in items:
        if "bench" in item.keywords:
            item.add_marker(skip)
