#!/bin/bash
# Session 50, call 2: session50_gpu.sh again, on the build with the tail's rows side by side, its global stores after the exchange.
exec bash "$(dirname "$0")/session50_gpu.sh" s50b
