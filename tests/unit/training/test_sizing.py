"""The GPU memory estimate follows its documented formula and refuses what cannot fit."""

from __future__ import annotations

import pytest

from slipway.training import sizing
from slipway.training.model import Sizing

GIB = sizing.GIB


def test_full_finetune_7b_adamw_bf16_states_are_16_bytes_per_parameter():
    est = sizing.estimate(Sizing(parameters=7_000_000_000, precision="bf16", optimizer="adamw"), gpus=1)
    # weights 2 + gradients 2 + fp32 master 4 + two fp32 moments 8 = 16 bytes per parameter
    assert est.weights + est.gradients + est.optimizer == pytest.approx(7e9 * 16)


def test_lora_keeps_weights_but_shrinks_gradients_and_optimizer():
    full = sizing.estimate(Sizing(parameters=7_000_000_000), gpus=1)
    lora = sizing.estimate(Sizing(parameters=7_000_000_000, method="lora", lora_trainable_fraction=0.01), gpus=1)
    assert lora.weights == full.weights
    assert lora.gradients == pytest.approx(full.gradients * 0.01)
    assert lora.optimizer == pytest.approx(full.optimizer * 0.01)


def test_states_shard_over_gpus_but_activations_do_not():
    one = sizing.estimate(Sizing(parameters=1_000_000_000), gpus=1)
    eight = sizing.estimate(Sizing(parameters=1_000_000_000), gpus=8)
    assert eight.weights == pytest.approx(one.weights / 8)
    assert eight.optimizer == pytest.approx(one.optimizer / 8)
    assert eight.activations == one.activations


def test_activation_checkpointing_cuts_activations_17x():
    plain = sizing.estimate(Sizing(parameters=1_000_000_000, batch_size=8), gpus=1)
    ckpt = sizing.estimate(Sizing(parameters=1_000_000_000, batch_size=8, activation_checkpointing=True), gpus=1)
    assert plain.activations / ckpt.activations == pytest.approx(17)


def test_shape_derived_from_parameters_matches_llama_7b():
    hidden, layers = sizing.shape(Sizing(parameters=7_000_000_000))
    assert 3900 < hidden < 4400
    assert 30 <= layers <= 35


def test_refusal_names_numbers_fields_and_fixes():
    spec = Sizing(parameters=7_000_000_000, batch_size=4, sequence_length=4096)
    message = sizing.refusal("team-a/llm-ft", spec, gpus_per_pod=1, nodes=1, gpu_memory_bytes=80 * GIB)
    assert message is not None
    assert message.startswith("TrainingRun team-a/llm-ft: needs ~")
    for words in (
        "weights 13.0",
        "optimizer state",
        "80.0 GiB",
        "spec.resources.gpus=1",
        "ask for",
        "spec.sizing.batchSize",
        "LoRA",
    ):
        assert words in message


def test_a_run_that_fits_is_not_refused():
    spec = Sizing(parameters=125_000_000, batch_size=8, sequence_length=1024)
    assert sizing.refusal("ns/small", spec, gpus_per_pod=1, nodes=1, gpu_memory_bytes=24 * GIB) is None


def test_min_gpus_to_fit_is_the_smallest_that_fits():
    spec = Sizing(parameters=7_000_000_000, batch_size=1, sequence_length=2048)
    n = sizing.min_gpus_to_fit(spec, 80 * GIB)
    assert n is not None
    assert sizing.estimate(spec, n).total <= 80 * GIB < sizing.estimate(spec, n - 1).total


def test_gpu_memory_from_node_labels():
    assert sizing.gpu_memory_from_labels({"nvidia.com/gpu.memory": "81920"}) == 80 * GIB
    assert sizing.gpu_memory_from_labels({"nvidia.com/gpu.product": "NVIDIA-L4"}) == 24 * GIB
    assert sizing.gpu_memory_from_labels({}) is None
