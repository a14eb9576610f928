"""The quantizer's pure parts: method names and weight-only float16 on a small graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from slipway.workloads import quantize
from slipway.workloads.common import ConfigError


def _linear_model(path: Path) -> np.ndarray:
    weights = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["logits"]), helper.make_node("Add", ["logits", "b"], ["out"])],
        "linear",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 10])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(np.ones(10, np.float32), "b")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return weights


def _run(path: Path, features: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": features})[0]


def test_fp16_halves_large_weights_and_keeps_the_graph_in_float32(tmp_path: Path) -> None:
    source, target = tmp_path / "model.onnx", tmp_path / "fp16.onnx"
    _linear_model(source)
    quantize.quantize_file(source, target, "fp16")
    converted = onnx.load(str(target))
    kinds = {i.name: i.data_type for i in converted.graph.initializer}
    assert kinds == {"W__fp16": TensorProto.FLOAT16, "b": TensorProto.FLOAT}  # b is too small to bother
    assert converted.graph.node[0].op_type == "Cast"
    features = np.random.default_rng(1).uniform(0, 16, size=(5, 64)).astype(np.float32)
    assert np.allclose(_run(source, features), _run(target, features), rtol=1e-2, atol=1e-1)
    assert target.stat().st_size < source.stat().st_size * 0.7


def test_none_copies_the_model(tmp_path: Path) -> None:
    source, target = tmp_path / "model.onnx", tmp_path / "copy.onnx"
    _linear_model(source)
    quantize.quantize_file(source, target, "none")
    assert target.read_bytes() == source.read_bytes()


def test_int8_dynamic_shrinks_weights(tmp_path: Path) -> None:
    source, target = tmp_path / "model.onnx", tmp_path / "int8.onnx"
    _linear_model(source)
    quantize.quantize_file(source, target, "int8-dynamic")
    assert any(i.data_type == TensorProto.INT8 for i in onnx.load(str(target)).graph.initializer)


def test_unknown_method_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLIPWAY_QUANTIZATION_METHOD", raising=False)
    with pytest.raises(ConfigError, match="not one of none, fp16, int8-dynamic, int8-static"):
        quantize.parse_args(["--model-uri", "models:/digits/1", "--method", "int4"])


def test_default_artifact_path_never_overwrites_the_training_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLIPWAY_QUANTIZATION_METHOD", raising=False)
    args = quantize.parse_args(["--model-uri", "models:/digits/1"])
    assert (args.method, args.artifact_path) == ("int8-dynamic", "model-int8-dynamic")


def test_a_model_uri_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLIPWAY_MODEL_URI", raising=False)
    with pytest.raises(ConfigError, match="SLIPWAY_MODEL_URI"):
        quantize.parse_args([])
