#!/usr/bin/env bash
# Issue 49's load, before and after in one run: a campaign that never pauses (the simulator's
# dialer), bulk tie groups several pages long stamped to the second, and an ordinary bad day's
# faults (5 % 500/502/503, 3 % 429 with Retry-After: 1, 2 % bodies cut, 1 % answers 3 s late,
# OAuth tokens of 3 s), on each tie order. Each run starts one simulator (this tree's build:
# the old one lacks --tie-group) and walks it with both binaries, pass for pass in turn
# (before, after, before, after …), each into a warehouse of its own, so that both meet the
# same service at the same hour. Per pass it records the exit status, each schedule's outcome,
# its checkpoint lag, the groups it held, and whether it logged an unstable tie order (a false
# verdict on the stable order). Then one static, stable, fault-free service, read whole by each:
# the requests of a first sync, which must not grow.
#
# Usage: benches/live_ties.sh [BEFORE_REV [RUNS [PASSES]]]   (default: f34929f 20 2)
#   ORDERS="stable shuffled top-n"  the tie orders to walk (one process an order may run
#   beside the others: they spend most of their time waiting on the faults' pauses)
#   STATIC=1  also the static service's first sync (0: skip it)
#   BEFORE_BIN=path  a build of BEFORE_REV already made (else built in a worktree; not
#   CALLSYNC_…: callsync reads those variables as its configuration)
# Prints one summary line per order and binary; the raw lines go to $OUT (default: a temp file).
# Listens on loopback only.
set -euo pipefail
before_rev=${1:-f34929f}
runs=${2:-20}
passes=${3:-2}
orders=${ORDERS:-stable shuffled top-n}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
out=${OUT:-$work/raw.tsv}
sim_pid=""
cleanup() {
    [ -n "$sim_pid" ] && kill "$sim_pid" 2> /dev/null || true
    if [ -d "$work/before" ]; then git -C "$root" worktree remove --force "$work/before" || true; fi
    [ -n "${OUT:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --locked --quiet --manifest-path "$root/Cargo.toml"
after="$root/target/release/callsync"
before=${BEFORE_BIN:-}
if [ -z "$before" ]; then
    git -C "$root" worktree add --quiet --detach "$work/before" "$before_rev"
    CARGO_TARGET_DIR="$work/before-target" cargo build --release --locked --quiet \
        --manifest-path "$work/before/Cargo.toml"
    before="$work/before-target/release/callsync"
fi

# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_sim ORDER SEED EXTRA… : a simulator in the background; its printed config in $work/sim.txt.
start_sim() {
    local order=$1 seed=$2
    shift 2
    local p
    p=$(port)
    "$after" simulate -q --listen "127.0.0.1:$p" --tie-order "$order" --seed "$seed" "$@" \
        > "$work/sim.txt" 2>&1 &
    sim_pid=$!
    # Waits for the simulator to say it listens: a patience only a hang reaches (60 s), polled.
    for _ in $(seq 1 1200); do
        grep -q '^schedules = ' "$work/sim.txt" 2> /dev/null && return 0
        sleep 0.05
    done
    echo "the simulator did not start: $(cat "$work/sim.txt")" >&2
    exit 1
}

stop_sim() {
    kill "$sim_pid" 2> /dev/null || true
    wait "$sim_pid" 2> /dev/null || true
    sim_pid=""
}

# config NAME OAUTH: a configuration for the running simulator, its warehouse NAME.db.
config() {
    local name=$1 oauth=$2 base token_url client_id client_secret schedules
    base=$(sed -n 's/^  base_url *= //p' "$work/sim.txt")
    token_url=$(sed -n 's/^  token_url *= //p' "$work/sim.txt")
    client_id=$(sed -n 's/^  client_id *= //p' "$work/sim.txt")
    client_secret=$(sed -n 's/^  client_secret *= //p' "$work/sim.txt")
    schedules=$(sed -n 's/^schedules = //p' "$work/sim.txt")
    {
        echo "[api]"
        echo "base_url = $base"
        if [ "$oauth" = 1 ]; then
            echo "[api.oauth]"
            echo "token_url = $token_url"
            echo "client_id = $client_id"
            echo "client_secret = $client_secret"
        else
            sed -n 's/^  access_token *= /access_token = /p' "$work/sim.txt"
        fi
        echo "[warehouse]"
        echo "path = \"$work/$name.db\""
        echo "[sync]"
        echo "schedules = $schedules"
        echo "page_size = 100"
    } > "$work/$name.toml"
}

# pass BIN NAME ORDER RUN N: one `sync --json`, one TSV line per schedule:
# order run pass binary exit outcome lag_secs held requests verdict
pass() {
    local bin=$1 name=$2 order=$3 run=$4 n=$5 status=0
    "$bin" --config "$work/$name.toml" sync --json > "$work/pass.json" 2> "$work/pass.log" || status=$?
    local verdict=0
    grep -q 'differently from one request to the next' "$work/pass.log" && verdict=1
    python3 - "$order" "$run" "$n" "$name" "$status" "$verdict" "$work/pass.json" >> "$out" << 'EOF'
import json, sys
order, run, n, name, status, verdict, path = sys.argv[1:]
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    p = json.loads(line)
    held = len(p.get("held_groups") or [])
    lag = p.get("lag_secs")
    print("\t".join(map(str, [order, run, n, name, status, p["outcome"],
                               "" if lag is None else f"{lag:.1f}", held, p["requests"], verdict])))
EOF
}

: > "$out"
for order in $orders; do
    for run in $(seq 1 "$runs"); do
        start_sim "$order" "$((4900 + run))" --schedules 3 --calls 2500 --tie-group 1000 \
            --precision millis --dialer --time-scale 0.02 --token-lifetime 3 \
            --fail-rate 0.05 --429-rate 0.03 --retry-after 1 --truncate-rate 0.02 \
            --slow-rate 0.01 --slow-ms 3000
        rm -f "$work"/before.db* "$work"/after.db*
        config before 1
        config after 1
        for n in $(seq 1 "$passes"); do
            pass "$before" before "$order" "$run" "$n"
            pass "$after" after "$order" "$run" "$n"
        done
        stop_sim
    done
done

# The cost on a static, stable, fault-free service: a first sync's requests, each binary.
if [ "${STATIC:-1}" = 1 ]; then
    start_sim stable 1 --schedules 3 --calls 2500 --tie-group 1000 --precision millis
    config before 0
    config after 0
    rm -f "$work"/before.db* "$work"/after.db*
    pass "$before" before static 1 1
    pass "$after" after static 1 1
    stop_sim
fi

python3 - "$out" << 'EOF'
import sys, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[(r[0], r[3])].append(r)
print("order\tbinary\tschedule-passes\tfailed\tgroups held\tfalse verdicts (passes)\tlag p50 s\tlag max s\trequests")
for (order, name), rs in sorted(by.items()):
    failed = sum(1 for r in rs if r[5] == "failed")
    held = sum(int(r[7]) for r in rs)
    verdict_passes = len({(r[1], r[2]) for r in rs if r[9] == "1"}) if order == "stable" else "-"
    lags = sorted(float(r[6]) for r in rs if r[6])
    p50 = lags[len(lags) // 2] if lags else float("nan")
    mx = lags[-1] if lags else float("nan")
    reqs = sum(int(r[8]) for r in rs)
    print(f"{order}\t{name}\t{len(rs)}\t{failed}\t{held}\t{verdict_passes}\t{p50:.1f}\t{mx:.1f}\t{reqs}")
EOF
echo "raw lines: $out"
