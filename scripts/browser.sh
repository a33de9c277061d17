#!/usr/bin/env bash
# Install the headless browser tests/test_web_page.py drives (Debian's chromium and
# chromium-driver), only when missing. CI calls it before the tests (.ci/run); on a developer
# machine without it, those tests skip and say why. Nothing is downloaded at pip install time.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "scripts/browser.sh: no apt-get here; install chromium and its chromedriver yourself" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
