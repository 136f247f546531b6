#!/bin/bash
# Session 45, calls 5-6: the parameter-hold lab (bench/pdl_lab/cb_hold.cu): Gemma-3-shaped layers of
# seven kernels on programmatic edges; when each kernel's first parameter read returns.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd bench/pdl_lab && nvcc -arch=sm_90 -O2 -std=c++17 -o /tmp/cb_hold cb_hold.cu 2>&1 | grep -v -i warn | head -5
Q=96:e:2800:0; R=6:w:2500:0; A=32:w:3000:64; O=160:e:700:0; G=128:e:3000:0; U=8:l:400:0; D=160:e:1000:0
/tmp/cb_hold "$Q,$R,$A,$O,$G,$U,$D" \
  "$Q,$R,32:w:3000:0,$O,$G,$U,$D" \
  "$Q,$R,32:e:3000:64,$O,$G,$U,$D" \
  "$Q,6:e:2500:0,$A,$O,$G,$U,$D" \
  "$Q,$R,4:w:3000:0,$O,$G,$U,$D" \
  "$Q,$R,$A,$O,$G,8:e:400:0,$D" \
  "$Q,$R,$A,$O,$G,$U,$D,8:w:500:0" \
  "96:w:2800:0,$R,$A,160:w:700:0,128:w:3000:0,$U,160:w:1000:0"
