#!/usr/bin/env bash
# A kneepoint tune on a lent GPU machine that has no network (tests/fixtures/real/README.md):
# shared/gpu's offline vLLM bundle comes in two parts, one per call, and the tune outlives the
# call that starts it, so a later call can wait for it and bring its run folder back.
#   gpu-tune.sh stash PART1_DIR                keep bundle part 1 for the next call
#   gpu-tune.sh start PART2_DIR STUDY WAIT_S [--set PATH=VALUE ...]
#                                              install the bundle, start the tune in a session
#                                              of its own, collect WAIT_S after the call began
#   gpu-tune.sh record PART2_DIR STUDY WAIT_S NAME[:PATH=VALUE,...] ...
#                                              install the bundle, then `kneepoint diagnose`
#                                              the study once per NAME (its --set overrides
#                                              after the colon), one after the other, each
#                                              into runs/NAME; collect as start does
#   gpu-tune.sh collect WAIT_S [stop]          wait up to WAIT_S more; with "stop", interrupt
#                                              a tune still running (SIGTERM: its servers are
#                                              stopped, its run folder resumes), then collect
# Collecting writes under $OUT: gpu.txt, install.log, console.log, events.jsonl, run.tgz.
# PART2_DIR holds shared/gpu's install-bundle.sh and make_model.py beside the part.
# On an H200 the study's utilisation becomes 0.17: the same 23.8 GiB as 0.3 of an H100.
set -uo pipefail
work=/tmp/gpu-tune
mkdir -p "$work"

wait_for() {  # wait_for SECONDS: until the tune has ended or SECONDS have passed
  local until=$(($(date +%s) + $1))
  while [ ! -f "$work/rc" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 2; done
}

collect() {
  local out=${OUT:?OUT names the folder that comes back}
  cp "$work"/gpu.txt "$work"/install.log "$work"/console.log "$work"/events.jsonl "$out"/ 2>/dev/null
  [ -f "$work/rc" ] && echo "tune exit code $(cat "$work/rc")" >>"$out/console.log"
  [ -d "$work/runs" ] && tar czf "$out/run.tgz" -C "$work/runs" .
  tail -n 40 "$work/console.log" 2>/dev/null
}

install() {  # install PART2_DIR STUDY: the bundle, the study and a copy of kneepoint
  cp "$2" "$work/study.yaml"
  if ! bash "$1/install-bundle.sh" "$work/p1" "$1" /tmp/site /tmp/llama8b >"$work/install.log" 2>&1; then
    OUT=${OUT:?} collect; cat "$work/install.log"; exit 1
  fi
  # its own copy of kneepoint: a later call re-sends the working tree under the running job
  mkdir -p "$work/src" && cp -r kneepoint configs "$work/src/"
  export PYTHONPATH="/tmp/site:$work/src" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
}

case "${1:?stash, start, record or collect}" in
stash)
  cp -r "${2:?PART1_DIR}" "$work/p1"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$work/gpu.txt"
  ;;
start)
  part2=${2:?PART2_DIR}; study=${3:?STUDY}; deadline=$(($(date +%s) + ${4:?WAIT_S})); shift 4
  install "$part2" "$study"
  sets=()
  grep -q H200 "$work/gpu.txt" && sets=(--set gpu=h200-sxm --set engine.gpu_memory_utilization=0.17)
  setsid bash -c 'python3 -m kneepoint --log-file "$0/events.jsonl" tune "$0/study.yaml" \
      --runs-dir "$0/runs" "$@" >"$0/console.log" 2>&1 & echo $! >"$0/pid"; wait $!; echo $? >"$0/rc"' \
    "$work" "${sets[@]}" "$@" </dev/null >/dev/null 2>&1 &
  wait_for $((deadline - $(date +%s)))
  collect
  ;;
record)
  part2=${2:?PART2_DIR}; study=${3:?STUDY}; deadline=$(($(date +%s) + ${4:?WAIT_S})); shift 4
  install "$part2" "$study"
  # one diagnose per configuration, in order; a failed start leaves its reason in console.log
  # and the next configuration still runs
  setsid bash -c 'for spec in "$@"; do
      name=${spec%%:*}; sets=(); IFS=, read -ra over <<<"${spec#"$name"}"
      for o in "${over[@]}"; do o=${o#:}; [ -n "$o" ] && sets+=(--set "$o"); done
      echo "== $name ${sets[*]}" >>"$0/console.log"
      python3 -m kneepoint --log-file "$0/events.jsonl" diagnose "$0/study.yaml" \
        --runs-dir "$0/runs/$name" "${sets[@]}" >>"$0/console.log" 2>&1
      echo "== $name exit $?" >>"$0/console.log"
    done; echo 0 >"$0/rc"' "$work" "$@" </dev/null >/dev/null 2>&1 &
  echo $! >"$work/pid"
  wait_for $((deadline - $(date +%s)))
  collect
  ;;
collect)
  wait_for "${2:?WAIT_S}"
  if [ "${3:-}" = stop ] && [ ! -f "$work/rc" ]; then
    # record's pid leads its process group; start's is the tune itself
    kill -TERM -- -"$(cat "$work/pid")" 2>/dev/null || kill -TERM "$(cat "$work/pid")"
    wait_for 40
  fi
  collect
  ;;
esac
