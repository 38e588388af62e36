#!/usr/bin/env bash
# A short real run's report.html rendered by headless Chromium is not blank,
# and a blank page fails the same check. A dp 2 x tp 2 run with a worker
# killed and recovered: in its TP chart, rendered alone, replica 0's line is
# seen beside replica 1's though both run at TP 2 (it was drawn under it),
# and the kill is one mark (the rank's failure_injected and its launcher's
# worker_exited, 20-40 ms apart, were two). Skips (77) without chromium.
# usage: report_browser_test.sh NTP_BINARY SOURCE_DIR
set -euo pipefail
ntp=$1
script=$2/scripts/report-screenshot
ink="python3 $2/scripts/png_ink.py"
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { echo "chromium absent: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$ntp" train --run-dir "$dir/run" --set train.steps=6 --set model.layers=1 --quiet
"$script" "$dir/run"
mkdir "$dir/blank" && echo '<!doctype html><title>blank</title>' >"$dir/blank/report.html"
if "$script" "$dir/blank"; then echo "the check passed a blank page" >&2; exit 1; fi

"$ntp" train --run-dir "$dir/kill" --set model.layers=1 --set train.steps=8 --set parallel.dp=2 --set parallel.tp=2 \
  --set train.global_batch=4 --set train.micro_batch=2 --set elastic.recover=true --set test.kill_rank=3 \
  --set test.kill_at_step=4 --quiet
"$script" "$dir/kill"
mkdir "$dir/tp"  # the TP chart alone: the colours below are its own
python3 - "$dir/kill/report.html" "$dir/tp/report.html" <<'PY'
import re, sys
svgs = re.findall(r"<svg.*?</svg>", open(sys.argv[1]).read(), re.S)
open(sys.argv[2], "w").write("<!doctype html><body style='margin:0'>" + svgs[3] + "</body>")
PY
"$script" "$dir/tp" "$dir/tp.png" >/dev/null || true  # one chart on a tall page is under its 1 % ink check
[[ -s $dir/tp.png ]] || { echo "no picture of the TP chart" >&2; exit 1; }
replica0=$($ink count "$dir/tp.png" 1f77b4)
replica1=$($ink count "$dir/tp.png" d62728)
failures=$($ink marks "$dir/tp.png" 2ca02c)
echo "TP chart: replica 0 $replica0 px, replica 1 $replica1 px, $failures failure mark(s)"
(( 2 * replica0 >= replica1 )) || { echo "replica 0's line is hidden under replica 1's" >&2; exit 1; }
(( failures == 1 )) || { echo "one kill is marked $failures times" >&2; exit 1; }
