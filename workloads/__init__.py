"""DDP training runs to profile: `python -m workloads.resnet --profile`, `python -m workloads.gpt --profile`.

`common` is the harness (launch, distributed setup, profiling, run.json), `training` the one training loop and the
`Workload` hooks a workload fills in, `config` the flags; a workload file holds only its model, data, loss and flags.
Model code (`gpt_model`, torchvision's ResNets) holds no torch.distributed.
"""
