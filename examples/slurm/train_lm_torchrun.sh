#!/bin/bash
# Multi-node NormFormer LM pre-training with torchrun: one launcher per node, which starts one
# process per GPU; fairseq reads WORLD_SIZE, RANK and LOCAL_RANK from torchrun.
#   On SLURM (one task per node), from the repository root:
#     ARCH=normformer_lm_gpt3_xl srun --nodes=4 --ntasks-per-node=1 --gpus-per-node=8 \
#       examples/slurm/train_lm_torchrun.sh DATA_BIN SAVE_DIR [fairseq-train args]
#   Elsewhere, on each node: NNODES=4 NODE_RANK=<0..3> MASTER_ADDR=<node 0> examples/slurm/train_lm_torchrun.sh ...
#   (the same PORT on every node; GPU_MEM_GB, CPU=1: see common.sh)
set -euo pipefail
source examples/slurm/common.sh
DATA_BIN=$1 SAVE_DIR=$2
shift 2
ARCH=${ARCH:-normformer_lm_gpt3_small}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NNODES=${SLURM_NNODES:-${NNODES:?set NNODES}}
NODE_RANK=${SLURM_NODEID:-${NODE_RANK:?set NODE_RANK}}
MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
WORLD_SIZE=$((NNODES * GPUS_PER_NODE))
lm_train_args "$DATA_BIN" "$@"
# SIGTERM, SIGUSR1 or SIGINT to this script reaches torchrun, which forwards it to its workers: they save
# checkpoint_last and exit 75, and so does this script, with one line (docs/distributed.md). torchrun runs
# through fairseq_normformer/runs/torchrun.py, which ends without torch's tracebacks when nothing failed.
run_forwarding "TERM USR1 INT" "$PY" -P "$REPO/fairseq_normformer/runs/torchrun.py" --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" \
  --node-rank "$NODE_RANK" --master-addr "$MASTER_ADDR" --master-port "${PORT:-29500}" \
  --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 "$(command -v fairseq-train)" "$DATA_BIN" "${LM_ARGS[@]}" "$@"
