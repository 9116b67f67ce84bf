"""Training runs to profile: DDP (`python -m workloads.resnet --profile`, `python -m workloads.gpt --profile`), FSDP2
(`workloads.fsdp`), pipeline parallel (`workloads.pipeline`) and 2-D meshes, tensor parallel inside FSDP2 or pipeline
x FSDP2 (`workloads.hybrid --mesh dp=2,tp=2` / `--mesh pp=2,dp=2`).

`common` is the harness (launch, distributed setup), `record` what a run writes (traces, progress, run.json),
`training` the one training loop and the `Workload` hooks a workload fills in, `config` the flags. A workload file
holds only its model, data, loss and flags; model code (`gpt_model`, torchvision's ResNets) holds no torch.distributed.
The model-parallel workloads have their own loops, since torch's pipeline schedule runs forward and backward itself:
`pipeline_run` (one rank of a pipeline job), `stages` (the GPT cut into stages and run.json's "layout" block).
"""
