#!/bin/bash
# Session 32b (same machine as 32, warm): the spans' cap, fixed spans (LOCKSTEP_CUDA_SPLIT_SPANS)
# per shape at depth 4096 and 1024, against the default rule (one wave, at most 128 spans).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-300}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
tg() { # model depth: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -d $2 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
run() { # model depth spans...
  m=$1; d=$2; shift 2; line="$m d$d default $(tg $m $d)"
  for s in "$@"; do line="$line | $s: $(LOCKSTEP_CUDA_SPLIT_SPANS=$s tg $m $d)"; done; echo "$line"
}
run smol 4096 132 176 256
run gemma3 4096 256 384 512
run l1b 4096 33 128 132
run l8b 4096 33 44 88 128
run smol 1024 64 256
run gemma3 1024 256 512
el
