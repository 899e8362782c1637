#!/usr/bin/env bash
# ctest wrapper for the `bench` label: runs a GPU benchmark, or reports the
# test as skipped (exit 77) on a machine without an NVIDIA GPU.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU: benchmark skipped"
  exit 77
fi
exec "$@"
