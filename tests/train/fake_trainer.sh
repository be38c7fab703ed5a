#!/bin/sh
# A stand-in for `graft train ... --json` in the job runner's tests: prints the
# trainer contract's events for a run of $FAKE_STEPS steps (default 6),
# checkpointing every 2 steps into its job dir. The first argument picks a
# behaviour:
#   ok            train, then land the adapter in the store and say done
#   bad-line      report a malformed dataset line 17 and exit 1
#   crash-once    die by SIGKILL after step 3 on the first run only
#   crash-always  print a complaint to stderr and die by SIGKILL after step 3
#   deaf          ignore SIGTERM (the runner must SIGKILL it)
# SIGTERM: finish the step, checkpoint, say stopped, exit 0.
mode=$1
shift
total=${FAKE_STEPS:-6}
delay=${FAKE_DELAY:-0.05}
resume=
while [ $# -gt 0 ]; do
  case $1 in
    --job-dir) dir=$2; shift ;;
    --resume) dir=$2; resume=1; shift ;;
    --id) id=$2; shift ;;
    --store) store=$2; shift ;;
    --data) data=$2; shift ;;
  esac
  shift
done
if [ -n "$resume" ]; then
  . "$dir/config"
else
  mkdir -p "$dir"
  printf 'id=%s\nstore=%s\ndata=%s\n' "$id" "$store" "$data" > "$dir/config"
fi
step=0
[ -f "$dir/checkpoint" ] && step=$(cat "$dir/checkpoint")
echo "{\"type\":\"start\",\"total_steps\":$total,\"train_examples\":8,\"valid_examples\":0,\"truncated\":0,\"train_tokens\":64,\"resumed_from\":$step,\"job_dir\":\"$dir\"}"

checkpoint() {
  echo "$step" > "$dir/checkpoint"
  echo "{\"type\":\"checkpoint\",\"step\":$step,\"path\":\"$dir/ckpt-$step\"}"
}
stop() {
  checkpoint
  echo "{\"type\":\"stopped\",\"step\":$step}"
  exit 0
}
if [ "$mode" = deaf ]; then trap '' TERM; else trap stop TERM; fi

if [ "$mode" = bad-line ]; then
  echo "graft train: $data:17: the line has no assistant turn" >&2
  echo "{\"type\":\"error\",\"code\":\"invalid_data\",\"message\":\"$data:17: the conversation has no assistant message to learn from\",\"file\":\"$data\",\"line\":17}"
  exit 1
fi

while [ "$step" -lt "$total" ]; do
  sleep "$delay"
  step=$((step + 1))
  echo "{\"type\":\"step\",\"step\":$step,\"total_steps\":$total,\"train_loss\":$((100 - step)).5,\"lr\":0.0001,\"tokens\":$((step * 10)),\"tokens_per_s\":200.0,\"eta_s\":$((total - step))}"
  [ $((step % 2)) -eq 0 ] && checkpoint
  if [ "$step" -eq 3 ]; then
    if [ "$mode" = crash-always ] || { [ "$mode" = crash-once ] && [ ! -f "$dir/crashed" ]; }; then
      touch "$dir/crashed"
      echo "fake trainer: out of luck at step 3" >&2
      kill -9 $$
    fi
  fi
done
mkdir -p "$store/$id"
echo "{\"type\":\"done\",\"adapter_id\":\"$id\",\"adapter_path\":\"$store/$id\",\"train_loss\":$((100 - step)).5,\"val_loss\":null,\"tokens\":$((step * 10)),\"wall_s\":1.0}"
