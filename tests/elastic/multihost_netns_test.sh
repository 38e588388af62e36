#!/usr/bin/env bash
# Multi-host `ntp train` on one machine: network namespaces stand in for
# hosts. A "switch" namespace holds a bridge; each host namespace is joined to
# it by a veth pair and has its own address (10.88.0.10 + node); Redis runs in
# the switch's namespace on the bridge's own address (10.88.0.2), as a store
# host of its own: cutting a host's port cuts it off from the store and the
# other host, while the other host still reaches the store. The run directory
# is a folder every "host" sees (one file system), as a shared run.dir would be.
#
# Cases: 2 hosts x 4 ranks train and verify (train); host 1 killed whole
# mid-run (kill: its launcher's process group, so its workers die with it and
# nobody on that host reports the deaths) and the job goes on and verifies;
# host 0 killed whole the same way (kill0: the job's first host; host 1 trains
# on, writes the summary in its place, and the run verifies with `ntp verify`);
# three ranks of host 0 whose heartbeats stop while they train (starved),
# which nobody may declare lost; Redis restarted mid-run, down longer than
# deadline.heartbeat_s (redis): no recovery; Redis killed for good
# (store-gone): both hosts stop naming the store and leave no process.
# Partitions (issue 32), each host cut off by its bridge port going down:
#   blip             host 1, 0.5 s, shorter than deadline.heartbeat_s: nobody is lost.
#   partition-lease  host 1, 4 s, between deadline.heartbeat_s and
#                    deadline.lease_s: nobody may act while the leases hold, so
#                    no recovery or (should the cut outlast a lease renewal's
#                    retries) host 1's ranks fence themselves and host 0 trains
#                    on without them; never both sides. Host 0 may declare
#                    them lost (rank_lost), or host 1, back first, reports
#                    their exits (4) itself and ends as after a recovered kill;
#                    ranks whose renewals drifted apart may split: those whose
#                    lease ran out inside the cut fence themselves and are the
#                    loss, the others train on.
#   partition-short  host 1, 8 s, past the lease, short of the store's reconnect
#                    deadline: host 1's ranks fence themselves, host 0 declares
#                    them lost once their leases are gone, trains on at DP 1 and
#                    verifies; back on the network host 1 exits 1, and host 0
#                    fences none of its own.
#   partition        host 1, 25 s, past the store's 20 s reconnect deadline: the
#                    same, and host 1 stops naming the store it lost.
#   store-cut0       host 0 (the job's first), 25 s, cut off from the store and
#                    host 1: its ranks fence themselves, host 1 declares them
#                    lost, trains on at DP 1, writes the summary in node 0's
#                    place and the run verifies; node 0 stops naming the store,
#                    while host 1 still trains (400 steps: at DP 1 a fast host
#                    did 200 before node 0 gave up on the store), and writes nothing
#                    to the run.
#   store-cut0-short the same, 8 s: node 0, back before its store calls give
#                    up, finds its ranks declared lost and exits 1; or, back
#                    before host 1's watcher declared them (a loaded
#                    machine), reports their self-fencing (exit 4) itself,
#                    finds host 1's agreement without them, says in the
#                    store that it leaves and exits 1. Host 1 writes the
#                    summary either way.
# Every partition case: each step committed once (metrics.jsonl, epochs), no
# process left on the host cut off, nothing exits 3.
#
# Usage: multihost_netns_test.sh NTP_BINARY [CASE...]
#   (cases: train kill kill0 partition partition-short partition-lease blip starved redis store-gone store-cut0
#    store-cut0-short)
# NTP_PARTITION_S / NTP_SHORT_PARTITION_S / NTP_LEASE_PARTITION_S / NTP_BLIP_S /
# NTP_CUT0_S / NTP_SHORT_CUT0_S: the cut of `partition` (25 s), `partition-short` (8 s),
# `partition-lease` (4 s), `blip` (0.5 s), `store-cut0` (25 s) and `store-cut0-short` (8 s).
# Needs root and `ip` (iproute2); without them it says so and exits 77 (skip).
# Every namespace, process and file it made is removed on any exit (NTP_NETNS_KEEP=1 keeps the files:
# the run directories and outputs, for a failure to be looked at).
set -u

NTP=$(realpath "${1:?usage: multihost_netns_test.sh NTP_BINARY [CASE...]}")
shift
CASES=("$@")
((${#CASES[@]})) || CASES=(train kill kill0 partition partition-short blip starved redis)
REDIS=$(command -v redis-server || true)

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no 'ip' (iproute2)"
[[ -n $REDIS ]] || skip "no redis-server"

ID="ntp$$"  # unique per run: parallel runs do not collide
TMP=$(mktemp -d "/tmp/ntp-netns-$ID.XXXX")
NAMESPACES=()
REDIS_PID=""

cleanup() {
  for ns in "${NAMESPACES[@]}"; do
    # Only processes inside this run's namespaces: ours.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  [[ -n ${NTP_NETNS_KEEP:-} ]] && echo "kept $TMP" || rm -rf "$TMP"
  echo "cleanup: removed namespaces ${NAMESPACES[*]:-none} and $TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The exit codes of the case that runs, as far as known ("-": not exited,
# or killed by the test): said with its PASS or FAIL line (the soak tallies them).
CODE0=- CODE1=-
fail() {
  echo "FAIL: $*"
  echo "exit codes: node0=$CODE0 node1=$CODE1"
  for f in "$TMP"/*.out; do
    [[ -f $f ]] && { echo "--- $f"; tail -n 30 "$f"; }
  done
  exit 1
}

ip netns add "$ID-probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$ID-probe"

# The switch and two hosts.
SW="$ID-sw"
ip netns add "$SW" && NAMESPACES+=("$SW") || fail "ip netns add $SW"
ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up || fail "bridge"
STORE_ADDR=10.88.0.2  # the store host: the bridge's own address, reachable from each host's port
ip -n "$SW" addr add "$STORE_ADDR/24" dev br0 && ip -n "$SW" link set lo up || fail "the store's address"
for node in 0 1; do
  ns="$ID-h$node"
  ip netns add "$ns" && NAMESPACES+=("$ns") || fail "ip netns add $ns"
  ip link add eth0 netns "$ns" type veth peer name "p$node" netns "$SW" || fail "veth of node $node"
  ip -n "$SW" link set "p$node" master br0 up || fail "port of node $node"
  ip -n "$ns" addr add "10.88.0.$((10 + node))/24" dev eth0 || fail "address of node $node"
  ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || fail "links of node $node"
done
echo "hosts: $ID-h0 (10.88.0.10) and $ID-h1 (10.88.0.11), bridged in $SW with Redis ($STORE_ADDR)"

export NTP_REDIS_PASSWORD="netns-$ID"  # AUTH on, as on a shared server
start_redis() {
  ip netns exec "$SW" "$REDIS" --port 6379 --bind "$STORE_ADDR" --requirepass "$NTP_REDIS_PASSWORD" \
    --save "" --appendonly yes --appendfsync always --dir "$TMP" --loglevel warning >>"$TMP/redis.log" 2>&1 &
  REDIS_PID=$!
  disown "$REDIS_PID"  # no job notice when the cleanup kills it
  for _ in $(seq 100); do
    ip netns exec "$SW" redis-cli -h "$STORE_ADDR" -a "$NTP_REDIS_PASSWORD" --no-auth-warning ping 2>/dev/null |
      grep -q PONG && return 0
    sleep 0.1
  done
  fail "redis-server did not come up"
}
start_redis

STEPS=36
SETTINGS=(--set parallel.dp=2 --set parallel.tp=4 --set train.global_batch=8
  --set elastic.recover=true --set deadline.heartbeat_s=2 --set deadline.collective_s=20
  --set deadline.rendezvous_s=30 --set deadline.lease_s=6)
# deadline.lease_s = 6: longer than the `redis` case's outage (3 s and a
# restart: every rank would fence itself), shorter than `partition-short`'s
# cut (host 1's ranks fence themselves at 5.4 s, before host 0 may act).
STORE="redis://$STORE_ADDR:6379"
PARTITION_S=${NTP_PARTITION_S:-25}  # longer than deadline.collective_s and the store's 20 s deadline
# Longer than deadline.heartbeat_s (host 1 is declared lost), shorter than
# deadline.collective_s and the store deadline (host 1's processes live on).
SHORT_PARTITION_S=${NTP_SHORT_PARTITION_S:-8}
BLIP_S=${NTP_BLIP_S:-0.5}  # shorter than deadline.heartbeat_s: nobody is lost
# Longer than deadline.heartbeat_s (host 1's beats go stale on host 0),
# shorter than deadline.lease_s: nobody may act on host 1 meanwhile.
LEASE_PARTITION_S=${NTP_LEASE_PARTITION_S:-4}
# Host 0 cut off from the store and host 1: longer than deadline.lease_s (its
# ranks fence themselves) and than the store's 20 s reconnect deadline.
CUT0_S=${NTP_CUT0_S:-25}
# The same, longer than deadline.lease_s but shorter than the store deadline:
# node 0's launcher is back with the store and finds its ranks declared lost.
SHORT_CUT0_S=${NTP_SHORT_CUT0_S:-8}
CUT_S=$PARTITION_S  # the cut of the case that runs
EXTRA=()  # settings of the case that runs
# Three of host 0's ranks stop beating while they train on (test.failures
# MUTE), as heartbeat threads starved on a loaded host do: their launcher
# vouches for them, and host 1's watcher must not declare them lost.
STARVED=(--set "test.failures=1@5:forward:MUTE;2@6:forward:MUTE;3@7:forward:MUTE")

# Starts node 0 (the job's first host) in the background, in a session of its
# own (setsid) like node 1; NODE0 is its pid.
start_node0() {
  local run=$1 out=$2
  ip netns exec "$ID-h0" setsid "$NTP" train "${SETTINGS[@]}" --set "train.steps=$STEPS" "${EXTRA[@]}" --run-dir "$run" --nnodes 2 --node-rank 0 --store "$STORE" \
    --iface 10.88.0.10 --verify >"$out" 2>&1 &
  NODE0=$!
}

# The spec with the job id that node 0 printed (what every other node must name).
job_spec() {
  local out=$1
  for _ in $(seq 300); do
    local spec
    spec=$(grep -o -- "--store redis://[^ ]*" "$out" | head -n 1 | cut -d' ' -f2)
    [[ -n $spec ]] && { echo "$spec"; return 0; }
    kill -0 "$NODE0" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Starts node 1 in a session of its own (setsid): its launcher leads a
# process group that can be killed whole. NODE1 is its pid.
start_node1() {
  local spec=$1 out=$2
  ip netns exec "$ID-h1" setsid "$NTP" train --nnodes 2 --node-rank 1 --store "$spec" --iface 10.88.0.11 \
    >"$out" 2>&1 &
  NODE1=$!
}

# Waits for pid $1 up to $2 seconds; its exit code in WAITED.
wait_for() {
  local pid=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      WAITED=$?
      return 0
    fi
    sleep 0.1
  done
  return 1
}

steps_logged() { [[ -f $1/metrics.jsonl ]] && wc -l <"$1/metrics.jsonl" || echo 0; }

wait_steps() {
  local run=$1 n=$2
  for _ in $(seq 600); do
    (($(steps_logged "$run") >= n)) && return 0
    kill -0 "$NODE0" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Kills host $2 whole: its launcher's process group (pid $3), workers with it.
kill_host() {
  local name=$1 node=$2 pid=$3 run=$4
  kill -9 -- "-$pid" || fail "$name: could not kill node $node's process group"
  { wait "$pid"; } 2>/dev/null  # reaped here, without the shell's job notice
  echo "$name: killed node $node's launcher process group (pid $pid) after $(steps_logged "$run") steps"
}

# Each step committed once: metrics.jsonl, which the writer appends to after
# a step's commit, holds steps 0..STEPS-1 once each in order, and no epoch was
# agreed twice with different members (two sides would each publish one).
# Host 0's ranks blocked in a collective on host 1 learn of its loss from the
# store (rank_lost, appended to ntp/lost): the recovery must begin within a
# few heartbeat intervals of it, not when deadline.collective_s ends (20 s
# after the cut; rank_lost comes about deadline.lease_s after it).
check_recovery_follows_the_loss() {
  local name=$1 run=$2 gap
  gap=$(jq -s '([.[] | select(.event == "rank_lost") | .time] | min) as $lost |
               ([.[] | select(.event == "failure_detected") | .time] | min) - $lost' "$run/events.jsonl")
  echo "$name: first failure_detected $gap s after the first rank_lost"
  awk -v g="$gap" 'BEGIN { exit !(g != "null" && g < 3) }' ||
    fail "$name: the recovery began $gap s after rank_lost (blocked collectives did not hear of the loss)"
}

check_committed_once() {
  local name=$1 run=$2
  local steps
  steps=$(jq -r '.step' "$run/metrics.jsonl" | tr '\n' ' ')
  [[ $steps == "$(seq -s ' ' 0 $((STEPS - 1))) " ]] || fail "$name: steps in metrics.jsonl, want 0..$((STEPS - 1)) once each: $steps"
  local split
  split=$(jq -c 'select(.event == "membership_agreed") | [.epoch, (.survivors | sort)]' "$run/events.jsonl" |
    sort -u | jq -r '.[0]' | uniq -d)
  [[ -z $split ]] || fail "$name: epochs agreed with different members: $split"
}

# A run of the two hosts, with `$2` done to it after step 4 (none, kill, kill0,
# partition, blip: a partition that loses nobody, redis, cut0: host 0 cut off
# the store and host 1).
# check_cut_off_host CASE NODE CODE OUTPUT RUN OTHER_RANKS: the host cut off
# stops (it cannot reach the store; not with 3: the job went on without it),
# names the store and leaves no process; the other host, which holds the
# store, keeps every rank (none of OTHER_RANKS, a digit class, is declared
# lost or fenced).
check_cut_off_host() {
  local name=$1 node=$2 code=$3 out=$4 run=$5 others=$6 own
  ((code != 0 && code != 3)) || fail "$name: node $node, cut off, exited $code"
  grep -qF "$STORE" "$out" || fail "$name: node $node's error does not name the store"
  [[ -z $(ip netns pids "$ID-h$node") ]] || fail "$name: processes left on host $node: $(ip netns pids "$ID-h$node")"
  own=$(grep -E '"event": *"rank_(lost|fenced)"' "$run/events.jsonl" | grep -E "\"rank\": *$others[,}]")
  [[ -z $own ]] || fail "$name: the host that holds the store lost or fenced its own ranks: $own"
}

run_case() {
  local name=$1 action=$2
  local run="$TMP/run-$name-$RANDOM" out0="$TMP/$name-node0.out" out1="$TMP/$name-node1.out"
  local started=$SECONDS
  CODE0=- CODE1=-
  start_node0 "$run" "$out0"
  local spec
  spec=$(job_spec "$out0") || fail "$name: node 0 printed no job spec"
  [[ $spec == *"?job="* ]] || fail "$name: the spec names no job: $spec"
  start_node1 "$spec" "$out1"
  if [[ $action != none ]]; then
    wait_steps "$run" 4 || fail "$name: no 4 steps logged"
  fi
  case $action in
    kill) kill_host "$name" 1 "$NODE1" "$run" ;;
    kill0) kill_host "$name" 0 "$NODE0" "$run" ;;
    partition | blip | lease | cut0)
      local at=$(steps_logged "$run") port=p1
      [[ $action == cut0 ]] && port=p0
      ip -n "$SW" link set "$port" down || fail "$name: could not cut $port"
      sleep "$CUT_S"
      ip -n "$SW" link set "$port" up || fail "$name: could not restore $port"
      echo "$name: cut host ${port#p} off the network after $at steps for $CUT_S s; $(steps_logged "$run") steps by then"
      ;;
    redis)
      local at=$(steps_logged "$run")
      kill -TERM "$REDIS_PID"
      while kill -0 "$REDIS_PID" 2>/dev/null; do sleep 0.05; done
      sleep 3  # longer than deadline.heartbeat_s: no beat can land meanwhile
      start_redis
      echo "$name: stopped redis-server after $at steps, started it again after $(steps_logged "$run")"
      ;;
  esac
  local code0=137 code1=137 finisher=$out0
  if [[ $action == kill0 || $action == cut0 ]]; then
    wait_for "$NODE1" 150 || fail "$name: node 1 did not finish within 150 s"
    code1=$WAITED CODE1=$WAITED
    finisher=$out1
    ((code1 == 0)) || fail "$name: node 1 exited with $code1"
    if [[ $action == cut0 ]]; then
      wait_for "$NODE0" 60 || fail "$name: node 0 did not stop within 60 s of node 1"
      code0=$WAITED CODE0=$WAITED
    fi
    grep -q "node 1 writes the run's summary" "$out1" || fail "$name: node 1 did not take over the summary"
    ip netns exec "$ID-h1" "$NTP" verify "$run" >"$TMP/$name-verify.out" 2>&1 ||
      fail "$name: ntp verify failed: $(tail -n 5 "$TMP/$name-verify.out")"
  else
    wait_for "$NODE0" 150 || fail "$name: node 0 did not finish within 150 s"
    code0=$WAITED CODE0=$WAITED
    if [[ $action != kill ]]; then
      wait_for "$NODE1" 30 || fail "$name: node 1 did not finish within 30 s of node 0"
      code1=$WAITED CODE1=$WAITED
    fi
    ((code0 == 0)) || fail "$name: node 0 exited with $code0"
    grep -q 'verify: pass — ' "$out0" || fail "$name: --verify did not pass"
  fi
  (($(steps_logged "$run") == STEPS)) || fail "$name: $(steps_logged "$run") steps logged, want $STEPS"
  grep -q "node 0: replica 0 (ranks 0-3); node 1: replica 1 (ranks 4-7)" "$out0" || fail "$name: no placement line"
  for rank in 0 1 2 3 4 5 6 7; do
    [[ -f $run/logs/rank-$rank.log ]] || fail "$name: no log of rank $rank in $run/logs"
  done
  check_committed_once "$name" "$run"
  local recoveries
  [[ -f $run/summary.json ]] || fail "$name: no summary.json"
  grep -q '"status": *"finished"' "$run/summary.json" || fail "$name: summary.json: $(cat "$run/summary.json")"
  recoveries=$(grep -c "^recovered:" "$finisher")
  local outcome=$action
  if [[ $action == lease ]]; then
    # A cut between the heartbeat and the lease: nobody acts while the
    # leases hold, so either the cut heals in time (no recovery, as a blip)
    # or host 1's ranks fenced themselves and are lost (as a partition).
    outcome=blip
    ((recoveries == 0)) || outcome=partition
    echo "$name: $([[ $outcome == blip ]] && echo "no recovery" || echo "host 1 fenced itself; host 0 recovered")"
  fi
  case $outcome in
    kill | kill0 | partition | cut0)
      local lost="[4,5,6,7]"
      [[ $action == kill0 || $action == cut0 ]] && lost="[0,1,2,3]"
      ((recoveries >= 1)) || fail "$name: no recovery reported"
      local declared=1
      grep -q '"event": *"rank_lost"' "$run/events.jsonl" || declared=0
      if ((!declared)) && [[ $action == lease || $action == cut0 ]]; then
        # The host cut off was back before the other declared its ranks
        # lost, and its launcher reported their self-fencing (exit 4) itself
        # (a cut0 whose cut barely outlasts the lease, on a loaded machine).
        local fenced want="4 5 6 7 " cut=1
        [[ $action == cut0 ]] && want="0 1 2 3 " cut=0
        fenced=$(jq -r 'select(.event == "worker_exited" and .exit_code == 4) | .rank' "$run/events.jsonl" |
          sort -n | tr '\n' ' ')
        if [[ $action == lease && -n $fenced && $fenced != "$want" ]]; then
          # Each rank renews its own lease: on a loaded host the renewals
          # drift apart, and a cut this close to the lease outlasts some
          # ranks' leases and not others'. Those fence themselves and are
          # the loss; the others hold theirs and train on.
          local r
          for r in $fenced; do [[ " $want" == *" $r "* ]] || fail "$name: rank $r of host 0 fenced itself"; done
          lost="[$(echo $fenced | tr ' ' ',')]"
          echo "$name: ranks $lost of host 1 fenced themselves (their leases ran out inside the cut); the others held theirs"
        else
          [[ $fenced == "$want" ]] ||
            fail "$name: host $cut fenced itself, but events.jsonl has no rank_lost and exit 4 only from: $fenced"
        fi
        echo "$name: host $cut reported its ranks' self-fencing (exit 4) before anyone declared them lost"
      else
        ((declared)) || fail "$name: no rank_lost event"
      fi
      grep -qF "lost ranks $lost" "$finisher" || fail "$name: ranks $lost not reported lost"
      grep "^recovered:" "$finisher"
      if [[ $outcome == partition ]]; then
        # The host cut off stops (it cannot reach the store, so it cannot
        # train on alone) and leaves no worker behind.
        # The side that holds the store keeps every rank.
        if ((declared)); then
          check_cut_off_host "$name" 1 "$code1" "$out1" "$run" '[0-3]'
          echo "$name: node 1 stopped with $code1: $(grep error "$out1" | head -n 1)"
          check_recovery_follows_the_loss "$name" "$run"
        else
          # Its self-fenced ranks are failures the job recovered from, as a
          # killed worker is: node 1 may end 0 (or 1), never 3, and leaves
          # no process.
          ((code1 != 3)) || fail "$name: node 1 exited 3"
          [[ -z $(ip netns pids "$ID-h1") ]] || fail "$name: processes left on host 1: $(ip netns pids "$ID-h1")"
          echo "$name: node 1 stopped with $code1"
        fi
      fi
      if [[ $action == cut0 ]]; then
        # Host 0, cut off, stops (not with 3: the job went on without it),
        # names the store and leaves no process; host 1 keeps every rank.
        check_cut_off_host "$name" 0 "$code0" "$out0" "$run" '[4-7]'
        # The run went on without node 0: it records nothing in it (no
        # run_failed, no failed summary.json), whether host 1 was still
        # training when node 0 gave up on the store (store-cut0: STEPS is
        # large enough for that) or had finished.
        local failed
        failed=$(grep -E '"event": *"run_failed"' "$run/events.jsonl")
        [[ -z $failed ]] || fail "$name: node 0, cut off, recorded a failure in the run host 1 went on with: $failed"
        # When node 0 stopped (its output's last write, its error) against
        # the end of the run: store-cut0 must stop it while host 1 trains.
        local stopped finished
        stopped=$(stat -c %Y "$out0")
        finished=$(jq -r 'select(.event == "run_finished") | .time | floor' "$run/events.jsonl" | tail -n 1)
        echo "$name: node 0 recorded no failure in the run; it stopped $((finished - stopped)) s before the run finished"
        if [[ $name == store-cut0 ]]; then
          ((stopped < finished)) || fail "$name: node 0 stopped after host 1 finished: the case did not test a run going on"
          grep -q "agreed epoch [0-9]* without its ranks" "$out0" || fail "$name: node 0 does not say the job went on without it"
        fi
        echo "$name: node 0 stopped with $code0: $(grep error "$out0" | head -n 1)"
      fi
      ;;
    *)
      ((code1 == 0)) || fail "$name: node 1 exited with $code1"
      ((recoveries == 0)) || fail "$name: $recoveries recoveries, want none"
      ! grep -qE '"event": *"rank_(lost|fenced)"' "$run/events.jsonl" ||
        fail "$name: ranks declared lost or fenced: $(grep -E '"event": *"rank_(lost|fenced)"' "$run/events.jsonl")"
      if [[ $name == starved ]]; then  # the case did happen: their launcher saw them starved
        grep -q '"event": *"rank_starved"' "$run/events.jsonl" || fail "$name: no rank_starved event"
      fi
      ;;
  esac
  echo "exit codes: node0=$CODE0 node1=$CODE1"
  echo "PASS $name ($((SECONDS - started)) s)"
}

# Redis killed mid-run and not brought back: no host reaches the store, so
# neither can agree on anything. Both launchers give up once the store's 20 s
# reconnect deadline passes, exit non-zero naming the store, and leave no
# process on either host; the run's summary says it failed.
run_store_gone_case() {
  local name=$1
  local run="$TMP/run-$name-$RANDOM" out0="$TMP/$name-node0.out" out1="$TMP/$name-node1.out"
  local started=$SECONDS
  CODE0=- CODE1=-
  start_node0 "$run" "$out0"
  local spec
  spec=$(job_spec "$out0") || fail "$name: node 0 printed no job spec"
  start_node1 "$spec" "$out1"
  wait_steps "$run" 4 || fail "$name: no 4 steps logged"
  kill -KILL "$REDIS_PID"
  echo "$name: killed redis-server after $(steps_logged "$run") steps"
  wait_for "$NODE0" 60 || fail "$name: node 0 did not stop within 60 s of the store's loss"
  local code0=$WAITED
  CODE0=$code0
  wait_for "$NODE1" 30 || fail "$name: node 1 did not stop within 30 s of node 0"
  local code1=$WAITED
  CODE1=$code1
  ((code0 != 0 && code1 != 0)) || fail "$name: exit codes $code0 and $code1, want both non-zero"
  grep -qF "lost the job's store $STORE and stopped its workers" "$out0" ||
    fail "$name: node 0 does not name the store it lost: $(grep error "$out0" | head -n 1)"
  grep -qF "node 1 lost the job's store $STORE" "$out1" ||
    fail "$name: node 1 does not name the store it lost: $(grep error "$out1" | head -n 1)"
  for h in 0 1; do
    [[ -z $(ip netns pids "$ID-h$h") ]] || fail "$name: processes left on host $h: $(ip netns pids "$ID-h$h")"
  done
  grep -q '"status": *"failed"' "$run/summary.json" || fail "$name: summary.json: $(cat "$run/summary.json")"
  start_redis  # for the cases after this one
  echo "exit codes: node0=$CODE0 node1=$CODE1"
  echo "PASS $name ($((SECONDS - started)) s): $(grep error "$out0" | head -n 1 | cut -c1-160)"
}

for c in "${CASES[@]}"; do
  case $c in
    train) run_case train none ;;
    kill) run_case kill kill ;;
    kill0) run_case kill0 kill0 ;;
    partition) CUT_S=$PARTITION_S run_case partition partition ;;
    partition-short) CUT_S=$SHORT_PARTITION_S run_case partition-short partition ;;
    partition-lease) CUT_S=$LEASE_PARTITION_S run_case partition-lease lease ;;
    blip) CUT_S=$BLIP_S run_case blip blip ;;
    starved)
      EXTRA=("${STARVED[@]}")
      STEPS=120 run_case starved none
      EXTRA=()
      ;;
    redis) run_case redis redis ;;
    store-gone) run_store_gone_case store-gone ;;
    # 200 steps: host 1 (0.17 s a step alone here) still trains when node 0
    # gives up on the store, 20 s into the cut.
    store-cut0) CUT_S=$CUT0_S STEPS=400 run_case store-cut0 cut0 ;;
    store-cut0-short) CUT_S=$SHORT_CUT0_S run_case store-cut0-short cut0 ;;
    *) fail "unknown case $c" ;;
  esac
done
echo "all cases passed"
