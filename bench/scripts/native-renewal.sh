#!/usr/bin/env bash
# Server time of a renewal per key: rlock's renewal script (lock/renew.lua, 100 keys per call,
# as the watchdog batches them) against the native owner-checked `SET key token IFEQ token PX
# ttl` (Valkey 8.1 and later), on one server, from its own counters (INFO commandstats).
#   usage: bench/scripts/native-renewal.sh [DIRECTORY_OF_SERVER_BINARIES]   (default: .servers/valkey-8.1)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.servers/valkey-8.1}
server=$(ls "$dir"/*-server | head -1)
cli=$(ls "$dir"/*-cli | head -1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
scratch=$(mktemp -d)
"$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$scratch" \
  --logfile "$scratch/log" --daemonize yes >/dev/null
trap '"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
sleep 0.5
c() { "$cli" -p "$port" "$@"; }
"$server" --version
sha=$(c SCRIPT LOAD "$(cat rlock-runtime/scripts/lock/renew.lua)")
keys=() values=()
for i in $(seq 0 99); do
  c SET "{b}k$i" tok >/dev/null
  keys+=("{b}k$i")
  values+=(tok 30000)
done
c SET "{b}one" tok >/dev/null
ifeq=no
if c SET "{b}one" tok IFEQ tok PX 30000 2>&1 | grep -q OK; then ifeq=yes; fi
c CONFIG RESETSTAT >/dev/null
redis-benchmark -p "$port" -c 4 -n 20000 -q EVALSHA "$sha" 100 "${keys[@]}" "${values[@]}" 2>/dev/null |
  tr '\r' '\n' | grep 'requests per second' | sed 's/.*: \([0-9.]* requests per second\).*/script, 100 keys per call: \1/'
if [ "$ifeq" = yes ]; then
  redis-benchmark -p "$port" -c 4 -P 25 -n 2000000 -q SET "{b}one" tok IFEQ tok PX 30000 2>/dev/null |
    tr '\r' '\n' | grep 'requests per second' | sed 's/.*: \([0-9.]* requests per second\).*/SET IFEQ, one key per command, 25 pipelined: \1/'
else
  echo "this server has no SET … IFEQ"
fi
c INFO commandstats | tr -d '\r' | awk -F'[:,=]' '
  /^cmdstat_evalsha:/ { printf "script: %.2f us per call, %.2f us per key\n", $7, $7 / 100 }
  /^cmdstat_set:/ { printf "SET IFEQ: %.2f us per key\n", $7 }'
