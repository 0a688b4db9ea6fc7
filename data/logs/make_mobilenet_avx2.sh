#!/bin/bash
# Short xgb tuning runs on MobileNet shapes, adding depthwise and pointwise convolutions to the training
# logs of the pretrained cost model (data/logs/avx2/). Run from the repository root on an AVX2 machine:
#     bash data/logs/make_mobilenet_avx2.sh            # ~15 min on 2 cores
set -e
OUT=${OUT:-data/logs/avx2}
TMP=$(mktemp -d)
tune() {  # name, trials, tune arguments...
    local name=$1 trials=$2; shift 2
    python -m tensortune.cli tune "$@" --tuner xgb --trials "$trials" --seed 0 --quiet --log "$TMP/$name.jsonl"
    gzip -9 -n -c "$TMP/$name.jsonl" > "$OUT/$name.jsonl.gz"
}
# MobileNet (v1) depthwise layers D1-D9, default template (depthwise_conv2d_nchwc)
for d in 1 2 3 4 5 6 7 8 9; do tune mobilenet_D${d}_dw 64 --workload mobilenet:D$d; done
# MobileNetV2 depthwise layers (3x3, stride 1, pad 1)
tune mbv2_dw_144x56 64 depthwise_conv2d --shape C=144 H=56 W=56 K=3 pad=1
tune mbv2_dw_576x14 64 depthwise_conv2d --shape C=576 H=14 W=14 K=3 pad=1
# pointwise (1x1) layers of MobileNet v1 and v2, packed template
for s in "32 64 112" "128 128 56" "256 256 28" "512 512 14" "1024 1024 7" "24 144 56" "96 576 14" "160 960 7"; do
    set -- $s
    tune pw_${1}_${2}_${3}_packed 48 conv2d --template conv2d_nchwc_packed --shape IC=$1 OC=$2 H=$3 W=$3 K=1
done
rm -rf "$TMP"
