"""A tiny real DDP run on CPU ranks with gloo under torch.profiler; used by test_ddp_cpu.py.

python tests/ddp_cpu_run.py OUT_DIR WORLD_SIZE PORT  -> OUT_DIR/rank-<r>.json.gz and OUT_DIR/params.json
"""

import gzip
import json
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def run(rank: int, world_size: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Flatten(), torch.nn.Linear(16 * 8, 64),
                                    torch.nn.ReLU(), torch.nn.Linear(64, 5))
        model[0].weight.requires_grad_(False)  # frozen: DDP must not all-reduce it
        ddp = DDP(model, bucket_cap_mb=0.01)  # several buckets
        opt = torch.optim.SGD([p for p in ddp.parameters() if p.requires_grad], lr=0.01)
        path = os.path.join(out, f"rank-{rank}.json")

        def export(prof):
            prof.export_chrome_trace(path)
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)

        schedule = torch.profiler.schedule(wait=1, warmup=1, active=4)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                    schedule=schedule, on_trace_ready=export) as prof:
            for _ in range(6):
                x = torch.randint(0, 50, (32, 8))
                loss = ddp(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        if rank == 0:
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            with open(os.path.join(out, "params.json"), "w") as f:
                json.dump({"trainable_params": trainable, "profiled_steps": 4}, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    out_dir, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mp.spawn(run, args=(world, out_dir, port), nprocs=world)
