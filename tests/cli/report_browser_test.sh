#!/usr/bin/env bash
# A short real run's report.html rendered by headless Chromium is not blank,
# and a blank page fails the same check. Skips (77) without chromium.
# usage: report_browser_test.sh NTP_BINARY SOURCE_DIR
set -euo pipefail
ntp=$1
script=$2/scripts/report-screenshot
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { echo "chromium absent: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$ntp" train --run-dir "$dir/run" --set train.steps=6 --set model.layers=1 --quiet
"$script" "$dir/run"
mkdir "$dir/blank" && echo '<!doctype html><title>blank</title>' >"$dir/blank/report.html"
if "$script" "$dir/blank"; then echo "the check passed a blank page" >&2; exit 1; fi
