#!/usr/bin/env bash
# Soak of the partition cases of multihost_netns_test.sh (issue 32): each of
# blip, partition-lease, partition-short, partition, store-cut0 and store-cut0-short run N times, each run in a
# fresh set of namespaces (one invocation of the test per run), then a tally
# per case: passes, failures, the exit codes the two nodes ended with, and the
# wall time. Exits 1 if any run failed, 77 (skip) if the test skips.
#
# Usage: multihost_netns_soak.sh NTP_BINARY [CASE...]
#   NTP_SOAK_RUNS: runs per case (default 10).
#   NTP_SOAK_LOAD: busy processes kept running meanwhile, as load (default 0).
#   NTP_SOAK_KEEP=1: keep the output of every run (else only of failed ones).
set -u

NTP=$(realpath "${1:?usage: multihost_netns_soak.sh NTP_BINARY [CASE...]}")
shift
CASES=("$@")
((${#CASES[@]})) || CASES=(blip partition-lease partition-short partition store-cut0 store-cut0-short)
RUNS=${NTP_SOAK_RUNS:-10}
LOAD=${NTP_SOAK_LOAD:-0}
TEST="$(dirname "$(realpath "$0")")/multihost_netns_test.sh"
OUT=$(mktemp -d /tmp/ntp-netns-soak.XXXX)

LOADERS=()
cleanup() {
  for pid in "${LOADERS[@]}"; do kill "$pid" 2>/dev/null; done
  [[ -n ${NTP_SOAK_KEEP:-} ]] || rm -f "$OUT"/*-pass.log
  rmdir "$OUT" 2>/dev/null || echo "outputs in $OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$LOAD"); do
  (while :; do :; done) &
  LOADERS+=($!)
done

declare -A PASS FAIL CODES SECS
for c in "${CASES[@]}"; do PASS[$c]=0 FAIL[$c]=0 CODES[$c]="" SECS[$c]=""; done
started=$SECONDS
# Rounds, each case once per round: a slow spell of the machine spreads over
# the cases instead of landing on one.
for round in $(seq "$RUNS"); do
  for c in "${CASES[@]}"; do
    log="$OUT/$c-$round.log"
    t=$SECONDS
    "$TEST" "$NTP" "$c" >"$log" 2>&1
    rc=$?
    ((rc == 77)) && { grep SKIP "$log"; exit 77; }
    codes=$(grep -o "exit codes: .*" "$log" | tail -n 1 | cut -d' ' -f3-)
    CODES[$c]+="${codes:-?} | "
    SECS[$c]+="$((SECONDS - t)) "
    if ((rc == 0)); then
      PASS[$c]=$((PASS[$c] + 1))
      mv "$log" "$OUT/$c-$round-pass.log"
      echo "round $round $c: pass ($((SECONDS - t)) s; $codes)"
    else
      FAIL[$c]=$((FAIL[$c] + 1))
      echo "round $round $c: FAIL ($((SECONDS - t)) s; $codes): $(grep -m1 '^FAIL' "$log")  [$log]"
    fi
  done
done

echo "tally ($RUNS runs per case, load $LOAD, $((SECONDS - started)) s):"
failed=0
for c in "${CASES[@]}"; do
  # Exit codes seen, with how often: "node0=1 node1=0 x9".
  seen=$(echo "${CODES[$c]}" | tr '|' '\n' | sed 's/^ *//; s/ *$//' | grep -v '^$' | sort | uniq -c |
    awk '{n=$1; $1=""; printf "%s%s x%d", (NR > 1 ? "; " : ""), substr($0, 2), n}')
  secs=$(echo "${SECS[$c]}" | tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%s..%s s", a[1], a[NR]}')
  printf '  %-16s pass %d  fail %d  exit codes: %s  (%s)\n' "$c" "${PASS[$c]}" "${FAIL[$c]}" "$seen" "$secs"
  failed=$((failed + FAIL[$c]))
done
((failed == 0))
