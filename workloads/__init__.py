"""DDP training runs to profile: `python -m workloads.resnet --profile`, `python -m workloads.gpt --profile`.

`common` is the shared harness (launch, setup, profiling, run.json), `training` the per-step helpers, `config` the
flags; model code (`gpt_model`, torchvision's ResNets) holds no torch.distributed.
"""
