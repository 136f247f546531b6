#!/bin/bash
# Prepared in session 45, not yet run: the parameter-hold lab with the mat-vecs' prologue (U:
# blockDim and the row count m read through the uniform datapath before the wait) in the o-like
# kernel and the others, Gemma-3's launch shapes. Session 45's engine timeline put the o's
# 3.6 us between its first parameter (an LDC, ready at once) and the code after that prologue.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd "$(dirname "$0")" && nvcc -arch=sm_90 -O2 -std=c++17 -o /tmp/cb_hold cb_hold.cu 2>&1 | grep -i error | head -5
Q=96:e:2800:4:s:512:1:1:1:WOU; R=1:w:2500:1:s:64:6:1:1:O; A=1:w:3000:48:s:256:4:8:8:LO
O=160:e:700:1:s:128:1:1:1:WOU; G=128:e:3000:4:s:512:1:1:1:WOU; U=8:l:400:1:s:256:1:1:1:O; D=160:e:1000:1:s:128:1:1:1:WOU
/tmp/cb_hold "$Q,$R,$A,$O,$G,$U,$D" "$Q,$R,1:w:3000:48:s:256:4:8:8:LOU,$O,$G,$U,$D"
