#!/bin/bash
# Session 50, call 5: session50_gpu.sh again, on the build with the tail's units decoded between the halves of the exchange's barrier (att_o.patch).
exec bash "$(dirname "$0")/session50_gpu.sh" s50e
