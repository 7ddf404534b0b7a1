#!/usr/bin/env bash
# Everything the SDK's CI needs, from a fresh clone: the broker binary the
# integration and browser tests run, the dev dependencies, chromium, then
# `npm test` (unit, integration, browser) and the bundle size.
#
#   bash client-sdk-ts/scripts/ci.sh      (from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TIDEGATE_BIN:-}" ]; then
  (cd .. && cargo build --release -p tidegate)
fi
npm ci --no-audit --no-fund
npm test
npm run --silent size
