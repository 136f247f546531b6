#!/bin/bash
# Session 38f (call 8): the submitted build after graph_exec's refactor (one error path, one
# builder of mmv_head2r's arguments): the head still rewritten, replays bitwise, tokens unchanged.
set -u
B=./.device/lockstep
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
echo "== $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 2 2>&1 | grep -E 'step graphs|\| tg' | tr -s ' ' | tr '\n' '|')"
$B check -m /tmp/smol.gguf --backend cuda > /tmp/c.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed' /tmp/c.txt | tr -s ' ' | cut -c1-100)"
h() { $B run --backend cuda -m /tmp/smol.gguf "$@" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol tokens: greedy $(h -p 'The quick brown fox' -n 48 --temp 0) (before: 10d82d4b9948)"
