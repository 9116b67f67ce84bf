"""DDP training runs to profile: `python -m workloads.resnet --profile`, `python -m workloads.gpt --profile`.

`common` is the harness (launch, distributed setup), `record` what a run writes (traces, progress, run.json),
`training` the one training loop and the `Workload` hooks a workload fills in, `config` the flags. A workload file
holds only its model, data, loss and flags; model code (`gpt_model`, torchvision's ResNets) holds no torch.distributed.
"""
