#!/usr/bin/env bash
# The EBT option study (issue 35): every option alone on our System-1
# recipe, and the System-2 preset, at 0.1M parameters, 2,400 iterations;
# then one `trainer think` table per run. Resumable: a finished run or
# table is skipped. Usage: run.sh VARIANT... (names below), one core each.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=./target/release/trainer
common=(--model ebt --d-model 64 --heads 4 --layers 2 --block 64 --batch 16 --iters 2400 --eval-every 300 --eval-iters 20 --quiet)
base=(--steps 2 --ebt-noise 0.3)
flags() {
  case "$1" in
    base) echo "${base[*]}" ;;
    probs) echo "${base[*]} --ebt-update probs --ebt-step-size 1.5" ;;
    truncate) echo "${base[*]} --ebt-truncate" ;;
    fixed-step) echo "${base[*]} --ebt-step-lr-mult 0" ;;
    jitter) echo "${base[*]} --ebt-step-jitter" ;;
    langevin) echo "${base[*]} --ebt-langevin 1.9" ;;
    rand-steps) echo "${base[*]} --ebt-extra-steps 1" ;;
    replay) echo "${base[*]} --ebt-replay 0.5" ;;
    own-input) echo "${base[*]} --ebt-input own" ;;
    s2) echo "--preset ebt-s2" ;;
    s2-step5) echo "--preset ebt-s2 --ebt-step-size 5" ;;
    s2-tied) echo "--preset ebt-s2 --ebt-input tied" ;;
    s2-tied-step5) echo "--preset ebt-s2 --ebt-input tied --ebt-step-size 5" ;;
    s2-tied-cal) echo "--preset ebt-s2 --ebt-input tied --ebt-calibrate 1" ;;
    s2-tied-con) echo "--preset ebt-s2 --ebt-input tied --ebt-contrastive 0.5" ;;
    contrastive) echo "${base[*]} --ebt-contrastive 0.5" ;;
    calibrate) echo "${base[*]} --ebt-calibrate 1" ;;
    soften) echo "${base[*]} --ebt-soften 0.5" ;;
    clamp) echo "${base[*]} --ebt-clamp 9" ;;
    s2-tied-clamp) echo "--preset ebt-s2 --ebt-input tied --ebt-clamp 1" ;;
    s2-nolangevin) echo "--preset ebt-s2 --ebt-langevin 0" ;;
    s2-noreplay) echo "--preset ebt-s2 --ebt-replay 0" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
for spec in "$@"; do
  name=${spec%@*}; seed=1337; [[ $spec == *@* ]] && seed=${spec#*@}
  dir=runs/ebt-study/$name-s$seed
  mkdir -p "$dir"
  if ! grep -q '^2400,' "$dir/log.csv" 2>/dev/null; then
    resume=(); [ -f "$dir/ckpt.safetensors" ] && resume=(--resume)
    echo "$(date +%T) train $name seed $seed"
    # shellcheck disable=SC2046
    $T train "${common[@]}" $(flags "$name") --seed "$seed" --out "$dir" "${resume[@]}" > "$dir/train.out" 2>&1
  fi
  if [ ! -s "$dir/think.md" ]; then
    echo "$(date +%T) think $name seed $seed"
    $T think --ckpt "$dir/best.safetensors" --ood data/ood/hamlet.txt --ood data/ood/alice.txt \
      --steps 1,2,4,8 --samples 1,4 --max-chars 8000 > "$dir/think.tmp" 2> "$dir/think.err" && mv "$dir/think.tmp" "$dir/think.md"
  fi
done
