#!/bin/bash
# Session 45, call 10: the parameter-hold lab with the step's real launch shapes (threads, the
# attention's {1,4,8} grid on clusters of 8, rope_store's {1,6}).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd bench/pdl_lab && nvcc -arch=sm_90 -O2 -std=c++17 -o /tmp/cb_hold cb_hold.cu 2>&1 | grep -i error | head -5
Q=96:e:2800:4:p:512; R=1:w:2500:1:p:64:6; A=1:w:3000:48:p:256:4:8:8; O=160:e:700:1; G=128:e:3000:4:p:512; U=8:l:400:1:p:256; D=160:e:1000:1
/tmp/cb_hold "$Q,$R,$A,$O,$G,$U,$D" \
  "$Q,$R,1:w:3000:48:p:256:4:8:1,$O,$G,$U,$D" \
  "$Q,$R,4:w:3000:48:p:512,$O,$G,$U,$D" \
  "$Q,$R,1:w:3000:1:p:256:4:8:8,$O,$G,$U,$D" \
  "$Q,1:w:2500:1:p:64,$A,$O,$G,$U,$D"
