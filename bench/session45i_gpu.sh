#!/bin/bash
# Session 45, call 11: the parameter-hold lab with what the first version lacked: loads before
# the waits (the attention's keys: L; the mat-vecs' first weights with the evict-first hint: W),
# outputs written and read across kernels (O), 512 bytes of parameters (b).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd bench/pdl_lab && nvcc -arch=sm_90 -O2 -std=c++17 -o /tmp/cb_hold cb_hold.cu 2>&1 | grep -i error | head -5
Q=96:e:2800:4:s:512:1:1:1:WO; R=1:w:2500:1:s:64:6:1:1:O; A=1:w:3000:48:s:256:4:8:8:LO
O=160:e:700:1:s:128:1:1:1:WO; G=128:e:3000:4:s:512:1:1:1:WO; U=8:l:400:1:s:256:1:1:1:O; D=160:e:1000:1:s:128:1:1:1:WO
/tmp/cb_hold "$Q,$R,$A,$O,$G,$U,$D" \
  "$Q,$R,1:w:3000:48:s:256:4:8:8:O,$O,$G,$U,$D" \
  "$Q,$R,$A,160:e:700:1:s:128:1:1:1:O,$G,$U,$D" \
  "$Q,$R,1:w:3000:48:b:256:4:8:8:LO,160:e:700:1:b:128:1:1:1:WO,$G,$U,$D" \
  "96:e:2800:4:s:512,1:w:2500:1:s:64:6,1:w:3000:48:s:256:4:8:8:L,160:e:700:1:s:128:1:1:1:W,128:e:3000:4:s:512:1:1:1:W,8:l:400:1:s:256,160:e:1000:1:s:128:1:1:1:W"
