#!/bin/bash
# Migrates a copy of a schema 5 warehouse with a callsync binary, sampling the file, its journal
# and the free disk every 2 s (BENCHMARKS.md, "Migration from schema 5").
# Usage: benches/schema5/migrate.sh BINARY SCHEMA5.db WORKDIR [perf]
set -euo pipefail
BIN=$1; ORIG=$2; WORK=$3; PERF=${4:-}
mkdir -p "$WORK"; DB="$WORK/callsync.db"
rm -f "$DB" "$DB-wal" "$DB-shm" "$DB-journal"; cp "$ORIG" "$DB"; sync
cat > "$WORK/callsync.toml" <<EOT
[api]
base_url = "http://127.0.0.1:9/"
access_token = "t"
[warehouse]
path = "$DB"
[sync]
schedules = []
EOT
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
( while true; do
    echo "$(date +%T) db=$(size "$DB") wal=$(size "$DB-wal") journal=$(size "$DB-journal") avail=$(df -B1 --output=avail "$WORK" | tail -1) load=$(cut -d' ' -f1 /proc/loadavg)"
    sleep 2
  done ) > "$WORK/sizes.log" &
SAMPLER=$!
trap 'kill $SAMPLER' EXIT
TIME=(/usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KiB peak RSS")
if [ -n "$PERF" ]; then
  "${TIME[@]}" perf record -F 499 -g -o "$WORK/perf.data" -- "$BIN" --config "$WORK/callsync.toml" migrate > "$WORK/out.log" 2>&1
else
  "${TIME[@]}" "$BIN" --config "$WORK/callsync.toml" migrate > "$WORK/out.log" 2>&1
fi
tail -2 "$WORK/out.log"
