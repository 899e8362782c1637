#!/usr/bin/env bash
# The container's entry point: turns the pod's environment (the ConfigMap's
# SPAR_* variables, and the LeaderWorkerSet's LWS_* ones) into daemon
# command lines.
#
#   spar-entrypoint.sh scheduler   the scheduler; its --workers list is the
#                                  stage leaders of this LWS group (stage 0 in
#                                  this pod, stage k in worker pod k), or
#                                  SPAR_WORKERS when set
#   spar-entrypoint.sh stage       this pod's pipeline stage: one spar-worker
#                                  per GPU (SPAR_TP_SIZE of them, tensor
#                                  rank r on GPU r); stage index and count from
#                                  SPAR_STAGE/SPAR_STAGES or LWS_WORKER_INDEX/
#                                  LWS_GROUP_SIZE. Rank 0 is the stage leader
#                                  (what the scheduler and the previous stage
#                                  dial); ranks r > 0 join it over loopback
#                                  (--tp-leader 127.0.0.1:SPAR_WORKER_PORT),
#                                  and it hands them the NCCL unique id
#
# Ports: rank r of a stage serves gRPC on SPAR_WORKER_PORT + r (default
# 50061 + r) and metrics on SPAR_WORKER_METRICS_PORT + r (default 9401 + r).
# SIGTERM is passed to every daemon, which drain (--shutdown-timeout); the
# script exits with the first non-zero daemon exit status, else 0.
# SPAR_ENTRYPOINT_DRY_RUN=1 prints the command lines instead (tests).
set -euo pipefail

bin_dir="${SPAR_BIN_DIR:-/opt/spar/bin}"
worker_port="${SPAR_WORKER_PORT:-50061}"
worker_metrics_port="${SPAR_WORKER_METRICS_PORT:-9401}"

die() {
  echo "spar-entrypoint: $*" >&2
  exit 2
}

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

# Stage leaders of this group, stage 0 first. LWS names pods
# <lws>-<group> (leader) and <lws>-<group>-<k> (worker k) under the group's
# headless service, and gives LWS_LEADER_ADDRESS as the leader's DNS name
# (<lws>-<group>.<service>.<namespace>...): worker k is that name with
# "-<k>" appended to its first label.
lws_workers() {
  local size="${LWS_GROUP_SIZE:?LWS_GROUP_SIZE is not set (not in a LeaderWorkerSet: set SPAR_WORKERS)}"
  local leader="${LWS_LEADER_ADDRESS:?LWS_LEADER_ADDRESS is not set (not in a LeaderWorkerSet: set SPAR_WORKERS)}"
  is_uint "$size" && ((size >= 1)) || die "LWS_GROUP_SIZE must be a positive integer, got '$size'"
  local host="${leader%%.*}" domain=""
  [[ "$leader" == *.* ]] && domain=".${leader#*.}"
  local list="127.0.0.1:${worker_port}"
  for ((k = 1; k < size; k++)); do list+=",${host}-${k}${domain}:${worker_port}"; done
  echo "$list"
}

pids=()
terminating=0
forward_term() {
  terminating=1
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
}

start_daemon() {
  if [[ "${SPAR_ENTRYPOINT_DRY_RUN:-0}" == 1 ]]; then
    printf '%q ' "$@"
    echo
    return
  fi
  "$@" &
  pids+=("$!")
}

# Waits for every daemon. The first to exit ends the stage: a stage
# without one of its ranks cannot serve, so the others are told to stop
# (they drain). Exits with the first non-zero daemon status, else 0.
wait_all() {
  [[ "${SPAR_ENTRYPOINT_DRY_RUN:-0}" == 1 ]] && return 0
  trap forward_term TERM INT
  local status=0 code p alive exited
  while ((${#pids[@]} > 0)); do
    wait -n "${pids[@]}" 2>/dev/null || true  # a daemon exited, or a signal came
    alive=()
    exited=0
    for p in "${pids[@]}"; do
      if kill -0 "$p" 2>/dev/null; then
        alive+=("$p")
      else
        code=0
        wait "$p" 2>/dev/null || code=$?
        if ((code != 0 && status == 0)); then status=$code; fi
        exited=1
      fi
    done
    pids=("${alive[@]}")
    if ((exited && ${#pids[@]} > 0 && !terminating)); then forward_term; fi
  done
  exit "$status"
}

role="${1:-}"
case "$role" in
  scheduler)
    workers="${SPAR_WORKERS:-}"
    [[ -n "$workers" ]] || workers="$(lws_workers)"
    start_daemon "${bin_dir}/spar-scheduler" --workers "$workers"
    wait_all
    ;;
  stage)
    stage="${SPAR_STAGE:-${LWS_WORKER_INDEX:-0}}"
    stages="${SPAR_STAGES:-${LWS_GROUP_SIZE:-1}}"
    tp="${SPAR_TP_SIZE:-1}"
    is_uint "$stage" || die "stage index must be a non-negative integer, got '$stage'"
    is_uint "$stages" && ((stages >= 1)) || die "stage count must be a positive integer, got '$stages'"
    ((stage < stages)) || die "stage index $stage is not below the stage count $stages"
    is_uint "$tp" && ((tp >= 1 && tp <= 8)) || die "SPAR_TP_SIZE must be in [1, 8], got '$tp'"
    # The flags below are per process; everything else (model, KV blocks,
    # backend, shutdown timeout) comes from the SPAR_* environment. The
    # environment's SPAR_STAGE(S)/SPAR_TP_SIZE would clash, so unset them.
    unset SPAR_STAGE SPAR_STAGES SPAR_TP_SIZE
    # Every rank sees every GPU of the pod (NCCL's peer-to-peer transport
    # needs them visible) and picks its own with --device.
    for ((r = 0; r < tp; r++)); do
      leader=()
      ((r == 0)) || leader=(--tp-leader "127.0.0.1:${worker_port}")
      start_daemon "${bin_dir}/spar-worker" --stage "$stage" --stages "$stages" \
        --tp-rank "$r" --tp-size "$tp" "${leader[@]}" --device "$r" \
        --port $((worker_port + r)) --metrics-port $((worker_metrics_port + r))
    done
    wait_all
    ;;
  *)
    die "usage: spar-entrypoint.sh scheduler|stage (got '${role}')"
    ;;
esac
