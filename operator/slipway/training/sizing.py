"""GPU memory estimate of a training run (pure).

Per GPU, in bytes, for a run on ``N = gpus × nodes`` GPUs with fully sharded
states (FSDP / ZeRO-3), which is how a large run is spread over many GPUs:

    weights      = P × b(precision) / N
    gradients    = T × b(precision) / N          (T = trainable parameters:
                                                 P, or P × loraTrainableFraction)
    optimizer    = T × s(optimizer, precision) / N
    activations  = batchSize × sequenceLength × hidden × layers × a
    total        = weights + gradients + optimizer + activations + 1 GiB (CUDA context, workspace)

b: bytes per value (fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5).
s: optimizer state bytes per trainable parameter: adam/adamw 8 (two fp32
moments), adamw-8bit 2, sgd-momentum 4, adafactor 4 (factored moments, rounded
up), sgd 0; plus 4 for the fp32 master copy when training below fp32.
a: activation bytes per token, hidden unit and layer: 34 in 16-bit without
recomputation (Korthikanti et al. 2022, with flash attention so the s² attention
scores are not kept), 2 with activation checkpointing (only layer inputs are
kept), scaled by b/2 for other precisions.
hidden and layers, when not given, come from the usual transformer shape:
P ≈ 12 × layers × hidden² with layers ≈ hidden / 128 (7B → 4096 × 32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from slipway.training.model import Sizing, TrainingRunSpec

GIB = 2**30
BYTES_PER_VALUE = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
OPTIMIZER_STATE_BYTES = {
    "adam": 8.0,
    "adamw": 8.0,
    "adamw-8bit": 2.0,
    "sgd-momentum": 4.0,
    "adafactor": 4.0,
    "sgd": 0.0,
}
MASTER_COPY_BYTES = 4.0
ACTIVATION_BYTES_16BIT = 34.0
ACTIVATION_BYTES_CHECKPOINTED = 2.0
CUDA_OVERHEAD_BYTES = 1.0 * GIB

# Memory of common GPUs (GiB) by the product label GPU feature discovery sets,
# for nodes that carry nvidia.com/gpu.product but not nvidia.com/gpu.memory.
GPU_MEMORY_GIB = {
    "NVIDIA-A100-SXM4-40GB": 40,
    "NVIDIA-A100-SXM4-80GB": 80,
    "NVIDIA-A100-PCIE-40GB": 40,
    "NVIDIA-A100-80GB-PCIe": 80,
    "NVIDIA-H100-80GB-HBM3": 80,
    "NVIDIA-H100-PCIe": 80,
    "NVIDIA-H200": 141,
    "NVIDIA-L4": 24,
    "NVIDIA-L40S": 48,
    "NVIDIA-A10G": 24,
    "Tesla-T4": 16,
    "Tesla-V100-SXM2-16GB": 16,
    "Tesla-V100-SXM2-32GB": 32,
}


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float
    gpus: int

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead


def shape(sizing: Sizing) -> tuple[int, int]:
    """(hidden, layers), given or derived from the parameter count."""
    hidden = sizing.hidden_size or max(64, round((sizing.parameters * 128 / 12) ** (1 / 3)))
    layers = sizing.num_layers or max(1, round(sizing.parameters / (12 * hidden * hidden)))
    return hidden, layers


def estimate(sizing: Sizing, gpus: int) -> Estimate:
    """Memory per GPU of a run over ``gpus`` GPUs in all."""
    gpus = max(1, gpus)
    b = BYTES_PER_VALUE[sizing.precision]
    trainable = sizing.parameters * (sizing.lora_trainable_fraction if sizing.method == "lora" else 1.0)
    state = OPTIMIZER_STATE_BYTES[sizing.optimizer] + (MASTER_COPY_BYTES if b < 4 else 0.0)
    hidden, layers = shape(sizing)
    per_unit = ACTIVATION_BYTES_CHECKPOINTED if sizing.activation_checkpointing else ACTIVATION_BYTES_16BIT
    activations = sizing.batch_size * sizing.sequence_length * hidden * layers * per_unit * (b / 2)
    return Estimate(
        weights=sizing.parameters * b / gpus,
        gradients=trainable * b / gpus,
        optimizer=trainable * state / gpus,
        activations=activations,
        overhead=CUDA_OVERHEAD_BYTES,
        gpus=gpus,
    )


def gib(value: float) -> float:
    return round(value / GIB, 1)


def min_gpus_to_fit(sizing: Sizing, gpu_memory_bytes: float, limit: int = 4096) -> int | None:
    """The fewest GPUs on which the run fits, or None if none do (activations alone too big)."""
    sharded = estimate(sizing, 1)
    fixed = sharded.activations + sharded.overhead
    if fixed >= gpu_memory_bytes:
        return None
    states = sharded.weights + sharded.gradients + sharded.optimizer
    n = math.ceil(states / (gpu_memory_bytes - fixed))
    return max(1, n) if n <= limit else None


def advice(sizing: Sizing, gpus: int, gpu_memory_bytes: float) -> list[str]:
    """What would make it fit, most direct first."""
    hints = []
    needed = min_gpus_to_fit(sizing, gpu_memory_bytes)
    if needed is not None and needed > gpus:
        hints.append(f"ask for {needed} GPUs in all (spec.resources.gpus × spec.nodes)")
    if sizing.batch_size > 1:
        hints.append("lower spec.sizing.batchSize")
    if not sizing.activation_checkpointing:
        hints.append("turn on spec.sizing.activationCheckpointing")
    if sizing.method == "full":
        hints.append("use LoRA (spec.sizing.method: lora)")
    return hints


def refusal(kind_name: str, sizing: Sizing, gpus_per_pod: int, nodes: int, gpu_memory_bytes: float) -> str | None:
    """The message refusing a run that cannot fit, or None when it fits."""
    est = estimate(sizing, gpus_per_pod * nodes)
    if est.total <= gpu_memory_bytes:
        return None
    hints = advice(sizing, gpus_per_pod * nodes, gpu_memory_bytes)
    return (
        f"TrainingRun {kind_name}: needs ~{gib(est.total)} GiB of GPU memory per GPU "
        f"(weights {gib(est.weights)}, gradients {gib(est.gradients)}, optimizer state {gib(est.optimizer)}, "
        f"activations {gib(est.activations)}, CUDA overhead {gib(est.overhead)}) "
        f"but each GPU has {gib(gpu_memory_bytes)} GiB "
        f"(spec.resources.gpus={gpus_per_pod} × spec.nodes={nodes}); " + ", or ".join(hints)
    )


def gpu_memory_from_labels(labels: dict[str, str]) -> float | None:
    """Bytes of one GPU of a node, from GPU feature discovery's labels."""
    mib = labels.get("nvidia.com/gpu.memory")
    if mib and mib.isdigit():
        return int(mib) * 2**20
    product = labels.get("nvidia.com/gpu.product")
    if product in GPU_MEMORY_GIB:
        return GPU_MEMORY_GIB[product] * GIB
    return None


def sizing_status(
    spec: TrainingRunSpec, kind_name: str, memory: float | None
) -> tuple[dict[str, float | bool], str | None]:
    """(status.sizing, refusal message) of a run with a ``spec.sizing``, given its GPUs' memory
    (per GPU, bytes; None when unknown: the estimate is reported, nothing is refused)."""
    assert spec.sizing is not None
    est = estimate(spec.sizing, spec.resources.gpus * spec.nodes)
    result: dict[str, float | bool] = {
        "weightsGib": gib(est.weights),
        "gradientsGib": gib(est.gradients),
        "optimizerGib": gib(est.optimizer),
        "activationsGib": gib(est.activations),
        "totalGib": gib(est.total),
    }
    if memory is None:
        return result, None
    result |= {"availableGib": gib(memory), "fits": est.total <= memory}
    return result, refusal(kind_name, spec.sizing, spec.resources.gpus, spec.nodes, memory)


def gpu_memory_of_nodes(nodes: list[dict[str, Any]], spec: TrainingRunSpec) -> float | None:
    """The largest GPU among nodes that match the run's nodeSelector and have enough GPUs."""
    best = None
    for node in nodes:
        node_labels = node["metadata"].get("labels") or {}
        if any(node_labels.get(key) != value for key, value in (spec.node_selector or {}).items()):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if int(allocatable.get(spec.resources.gpu_resource_name, "0")) < spec.resources.gpus:
            continue
        memory = gpu_memory_from_labels(node_labels)
        if memory is not None and (best is None or memory > best):
            best = memory
    return best
