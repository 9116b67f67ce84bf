#!/usr/bin/env bash
# The GPU check (issue 14): every workload variant for a few profiled steps on one GPU, read back by tracekit and
# checked (clean exit, summarize, NCCL kernels read as comm, all-reduce bytes = 4 x trainable params, idle % and
# overlap % within 1 pt of HolisticTraceAnalysis), with throughput, profiler overhead, AMP and channels-last
# speed-ups in OUT/gpu_check.md. About 5-8 minutes on one H200. Exit status 1 when any check fails.
#
#   benchmarks/gpu_check.sh [--out DIR]       on a machine with a CUDA GPU (default DIR: runs/gpu_check)
#   benchmarks/gpu_check.sh --dry-run [--out DIR]
#                                             on a CPU machine, in about a minute: parses every GPU command, makes one
#                                             small CPU run and writes the report from it (tests/test_gpu_check.py)
#   benchmarks/gpu_check.sh --prepare         here, with network: downloads the wheels the GPU machine lacks
#   ... --pack DIR                            after the check, copies what to keep into DIR (at most 8 files):
#                                             gpu_check.md, checks.json, results.tar.gz (logs, summaries, run.jsons)
#                                             and sample-run.tar.gz (the 2-rank GPU run, if under 5 MB)
#
# Preparing for the lent device machine (python3 3.12 with torch 2.11, torchvision, numpy, pandas, pyarrow, psutil,
# tqdm, networkx, pyyaml, narwhals; no msgspec, isal, HolisticTraceAnalysis or plotly, and no package registry):
#   1. here, once:  benchmarks/gpu_check.sh --prepare
#      = pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d wheels/  msgspec isal
#        holistictraceanalysis plotly (HTA's other needs are in the image; its jupyterlab/pydot/pytest needs are never
#        imported by the calls made here). wheels/ is git-ignored; set GPU_CHECK_PY=3.X for another Python.
#   2. launch with the device tool, carrying the wheels (the working tree travels, ../shared does not):
#        run(command="bash benchmarks/gpu_check.sh --out /tmp/gpu_check --pack $OUT", carry=["wheels"],
#            timeout_s=540)
#      The script installs the wheels into /tmp/gpu_check_site (no index, no deps) when msgspec/isal/hta are missing,
#      and puts the repository first on PYTHONPATH: nothing is installed into the image.
#   3. back here: docs/gpu_check.md <- gpu_check.md; tar -xzf sample-run.tar.gz -C sample_traces/
#      (and add its command to sample_traces/README.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python && -z ${PYTHON:-} ]] && PY=.venv/bin/python

if [[ ${1:-} == --prepare ]]; then
    ver=${GPU_CHECK_PY:-3.12}
    mkdir -p wheels
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version "$ver" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d wheels msgspec==0.23.0 isal==1.9.1 holistictraceanalysis==0.5.0 plotly==7.1.0
    ls -l wheels
    exit 0
fi

pack=""
args=()
while (($#)); do
    case $1 in
        --pack) pack=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

if ! "$PY" -c "import msgspec, isal, hta" 2>/dev/null; then
    if compgen -G "wheels/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/gpu_check_site wheels/*.whl
        export PYTHONPATH=/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}
    else
        echo "gpu_check: msgspec, isal or HolisticTraceAnalysis is missing and there is no wheels/: run" \
             "benchmarks/gpu_check.sh --prepare where pip can reach PyPI" >&2
    fi
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

status=0
"$PY" benchmarks/gpu_check.py ${args[@]+"${args[@]}"} || status=$?

if [[ -n $pack ]]; then
    out=$("$PY" -c "import sys; from pathlib import Path; a=sys.argv[1:]; \
print(Path(a[a.index('--out')+1] if '--out' in a else 'runs/gpu_check').resolve())" ${args[@]+"${args[@]}"})
    mkdir -p "$pack"
    cp "$out/gpu_check.md" "$out/checks.json" "$pack/" 2>/dev/null || true
    tar -czf "$pack/results.tar.gz" -C "$out" logs summaries $(cd "$out" && ls runs/*/run.json 2>/dev/null) \
        2>/dev/null || true
    for sample in resnet-2rank-nccl resnet-2rank-gloo; do
        if [[ -f $out/runs/$sample/run.json ]]; then
            tar -czf "$pack/sample-run.tar.gz" -C "$out/runs" --transform "s,^$sample,resnet-gpu-2rank-${sample##*-}," "$sample"
            if (($(stat -c %s "$pack/sample-run.tar.gz") > 5000000)); then
                echo "gpu_check: $sample is over 5 MB packed; not kept as a sample" >&2
                rm "$pack/sample-run.tar.gz"
            fi
            break
        fi
    done
fi
exit $status
