#!/usr/bin/env bash
# The GPU check (issues 14, 23): every workload variant for a few profiled steps on one GPU, read back by tracekit
# and checked: clean exit, summarize, NCCL kernels read as comm, all-reduce bytes = 4 x trainable params, idle % and
# overlap % within 1 pt of HolisticTraceAnalysis (HTA), and tracekit's newer tables: the kernel table's top 10
# kernels per rank (calls equal, total_us within 1e-6 of HTA's get_gpu_kernel_breakdown), FLOPs per window step
# within 3% of torch's FlopCounterMode (run.json), MFU finite with the device's datasheet entry ('NVIDIA H200' ->
# H200 SXM; bf16/fp16/tf32/fp32 dense peaks recorded), rank 0's trace memory peak within 2% of
# torch.cuda.max_memory_allocated (run.json). Every workload run passes --profile-memory --with-flops. One
# launch-bound run (benchmarks/gpu_check_graph.py: ResNet-18, 32px, batch 4) has its step predicted by
# tracekit.whatif's no_host_gaps and then timed as a CUDA graph (within 30%). OUT/gpu_check.md has throughput,
# profiler overhead, AMP and channels-last speed-ups with AMP's memory saving, MFU per variant, and the prediction
# against the measurement. Exit status 1 when any check fails. Tolerances: benchmarks/gpu_check_tables.py.
#
# Time on one H200, in one device call (expected; the limits are enforced by benchmarks/gpu_check.py):
#   carried wheels: unpack llvmlite (xz) + pip install --target      ~15 s  (only for modules the image lacks)
#   runs, one after the other (each start-up ~10 s, 12 steps, trace export with memory events):
#     ResNet-50 x 5 (fp32, bf16, bf16-cl, fp16, fp16-cl)            ~100 s  (~20 s each)
#     DataParallel, GPT-2 small, FSDP2                                ~60 s
#     2 ResNet-18 ranks (NCCL; gloo only if NCCL refuses: +30 s)      ~30 s
#     launch-bound: 12 eager steps + capture + 60 graph replays       ~20 s
#   analysis: tracekit + one HTA parse per run, 6 in parallel         ~45 s
#   expected in all                                                 ~4.5 min
# Limits: a run starts only within 270 s of the first and is stopped after 90 s; analysis not done 400 s after
# gpu_check.py started fails. So the call ends within 7 minutes: give it timeout_s=480.
#
#   benchmarks/gpu_check.sh [--out DIR]       on a machine with a CUDA GPU (default DIR: runs/gpu_check)
#   benchmarks/gpu_check.sh --dry-run [--out DIR]
#                                             on a CPU machine, in 1-2 minutes: parses every GPU command, makes two
#                                             small CPU runs (2 gloo ranks; the launch-bound script, eager only) and
#                                             writes the report from them: FLOPs and the memory table are checked on
#                                             CPU ranks, MFU, CUDA memory and the CUDA-graph prediction say 'not
#                                             applicable on CPU' (tests/test_gpu_check.py)
#   benchmarks/gpu_check.sh --prepare         here, with network: downloads the wheels the GPU machine lacks
#   ... --pack DIR                            after the check, copies what to keep into DIR (at most 8 files):
#                                             gpu_check.md, checks.json, results.tar.gz (logs, summaries, run.jsons)
#                                             and sample-run.tar.gz (the 2-rank GPU run, if under 5 MB)
#
# Preparing for the lent device machine (python3 3.12 with torch 2.11, torchvision, numpy 2.5, pandas, pyarrow,
# psutil, tqdm, networkx, pyyaml, narwhals; no msgspec, isal, HolisticTraceAnalysis or plotly, and no registry; its
# image's package list names numba and llvmlite too, of a version not read: the check carries its own pinned pair
# and uses it only where the image's `import numba` fails, e.g. a numba that rejects the image's numpy):
#   1. here, once:  benchmarks/gpu_check.sh --prepare          (about 4 minutes of one core, nearly all of it xz)
#      = pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d wheels/  msgspec==0.23.0
#        isal==1.9.1 holistictraceanalysis==0.5.0 plotly==7.1.0 numba==0.68.1 llvmlite==0.50.0
#        (HTA's other needs are in the image; its jupyterlab/pydot/pytest needs are never imported by the calls made
#        here). numba is what tracekit's replay and op tree are compiled with (tracekit/predict/longest.py,
#        tracekit/events/_optree_kernel.py); numba 0.68.1 needs llvmlite 0.50.x and numpy >=1.22,<2.6 (the image's
#        numpy 2.5.2, as last read, is in range; it is not carried). Then benchmarks/gpu_check_wheels.py packs each
#        wheel over 3 MB as <wheel>.xz: llvmlite's wheel alone is 57 MiB and the device tool carries 64 MiB with the
#        working tree (about 6 MiB); packed, wheels/ is 42 MiB (llvmlite 37.6). Tried here with Python 3.12 and
#        numpy 2.5.2: installed from wheels/ alone, tracekit's replay (numba) and HTA ran. wheels/ is git-ignored;
#        GPU_CHECK_PY=3.X for another Python.
#   2. launch with the device tool, carrying the wheels (the working tree travels, ../shared does not):
#        run(command="bash benchmarks/gpu_check.sh --out /tmp/gpu_check --pack $OUT", carry=["wheels"],
#            timeout_s=480)
#      For each of msgspec, isal, plotly, hta and numba that the image's python cannot import, the script unpacks
#      its carried wheels (numba with llvmlite) and installs them into /tmp/gpu_check_site (no index, no deps), first
#      on PYTHONPATH, with the repository: nothing is installed into the image, and a working copy there is used.
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
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d wheels msgspec==0.23.0 isal==1.9.1 holistictraceanalysis==0.5.0 \
        plotly==7.1.0 numba==0.68.1 llvmlite==0.50.0
    "$PY" benchmarks/gpu_check_wheels.py pack wheels
    ls -l wheels
    echo "gpu_check: wheels/ holds $(du -sm wheels | cut -f1) MB; the device tool carries 64 MiB with the working tree"
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

if ! "$PY" -c "import msgspec, isal, hta, numba" 2>/dev/null; then
    if compgen -G "wheels/*.whl*" >/dev/null; then
        # only the modules the image lacks (numba comes with its llvmlite); .whl.xz files are unpacked first
        "$PY" benchmarks/gpu_check_wheels.py install wheels /tmp/gpu_check_site || true
        export PYTHONPATH=/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}
    else
        echo "gpu_check: msgspec, isal, HolisticTraceAnalysis or numba is missing and there is no wheels/: run" \
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
