#!/usr/bin/env bash
# The web console's checks (CI stage of tests/run.sh; also fine by hand): installs the locked
# dependencies, lints, type-checks, runs the unit tests, builds web/dist and checks the bundle
# size (docs/console.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../web"
command -v npm >/dev/null 2>&1 || { echo "tests/web.sh: npm not found (deploy/install-deps.sh)" >&2; exit 1; }
npm ci --no-audit --no-fund
npm run lint
npm run typecheck
npm test
npm run build
npm run size
