#!/bin/bash
# Session 50, call 4: session50_gpu.sh again, on the build with each lane's activation unit loaded once for its rows.
exec bash "$(dirname "$0")/session50_gpu.sh" s50d
