#!/usr/bin/env bash
# What `#[distributed_lock]` costs a user's build, against plain functions and against
# `#[tracing::instrument]` on the same functions: one crate of N annotated `async fn`s, built
# in debug without incremental compilation, its dependencies already built, the minimum of
# R rebuilds of the crate alone for each variant, all in one run.
#
#   bench/scripts/compile-cost.sh [N] [R]      (defaults: 200 functions, 3 rebuilds)
#
# Prints one line per variant and the cost per annotated function (the variant's time less
# the plain one's, over N). The crate is generated under target/compile-cost.
set -euo pipefail

n=${1:-200}
rounds=${2:-3}
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir="$repo/target/compile-cost"
mkdir -p "$dir/src"
tracing_version=$(grep -m1 -A2 '^name = "tracing"$' "$repo/Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p')

cat >"$dir/Cargo.toml" <<EOF
[package]
name = "compile-cost"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
rlock-runtime = { path = "$repo/rlock-runtime" }
tracing = { version = "=${tracing_version}", features = ["attributes"] }

[workspace]
EOF
# The workspace's lock file, so that the dependencies are the versions rlock is tested with.
cp "$repo/Cargo.lock" "$dir/Cargo.lock"

# The crate's source with every function under `$1` (nothing for plain functions).
generate() {
  {
    echo "#![allow(dead_code)]"
    echo "use rlock_runtime::LockError;"
    for i in $(seq 1 "$n"); do
      [ -n "$1" ] && echo "$1"
      echo "pub async fn handler_$i(user_id: u64, voucher_id: u64) -> Result<u64, LockError> {"
      echo "    Ok(user_id + voucher_id + $i)"
      echo "}"
    done
  } >"$dir/src/lib.rs"
}

# The fastest of `rounds` rebuilds of the crate alone, in seconds.
rebuild() {
  local best=""
  for _ in $(seq 1 "$rounds"); do
    touch "$dir/src/lib.rs"
    local start end took
    start=$(date +%s.%N)
    CARGO_INCREMENTAL=0 cargo build --quiet --manifest-path "$dir/Cargo.toml" \
      --target-dir "$dir/target"
    end=$(date +%s.%N)
    took=$(awk "BEGIN { print $end - $start }")
    if [ -z "$best" ] || awk "BEGIN { exit !($took < $best) }"; then
      best=$took
    fi
  done
  echo "$best"
}

# Dependencies built once, before anything is timed.
generate ""
CARGO_INCREMENTAL=0 cargo build --quiet --manifest-path "$dir/Cargo.toml" --target-dir "$dir/target"

declare -A took
for variant in plain rlock tracing; do
  case $variant in
    plain) generate "" ;;
    rlock) generate '#[rlock_runtime::distributed_lock(key = "order:<user_id>", ttl = "10s")]' ;;
    tracing) generate '#[tracing::instrument]' ;;
  esac
  took[$variant]=$(rebuild)
  printf 'compile-cost: %-8s %d fns: %.2f s (minimum of %d)\n' "$variant" "$n" "${took[$variant]}" "$rounds"
done
for variant in rlock tracing; do
  awk "BEGIN { printf \"compile-cost: %-8s %.1f ms per annotated fn\\n\", \"$variant\", (${took[$variant]} - ${took[plain]}) * 1000 / $n }"
done
awk "BEGIN { printf \"compile-cost: rlock / tracing per fn: %.2f\\n\", (${took[rlock]} - ${took[plain]}) / (${took[tracing]} - ${took[plain]}) }"
