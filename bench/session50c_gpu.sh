#!/bin/bash
# Session 50, call 3: session50_gpu.sh again, on the build with the tail's units decoded before the grid wait.
exec bash "$(dirname "$0")/session50_gpu.sh" s50c
