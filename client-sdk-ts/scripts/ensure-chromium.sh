#!/usr/bin/env bash
# The browser test drives Debian's chromium with playwright-core (browser
# downloads do not work here). Install it when it is missing.
set -euo pipefail
CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
echo "ensure-chromium: $CHROMIUM is missing; installing Debian's chromium" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
[ -x "$CHROMIUM" ] || { echo "ensure-chromium: chromium still missing at $CHROMIUM" >&2; exit 1; }
