"""tests/e2e: e2e_stack.py (next to this file) is importable; the `bench` mark."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config):
    config.addinivalue_line("markers", "bench: the jobs-page benchmark with 100,000 jobs (slow)")
