"""The reference workloads that run inside Slipway's pods (DESIGN.md §3).

Each is a program: ``python -m slipway.workloads.<name>`` with ``train`` (or ``train_mlflow``,
the same trainer written with MLflow's own client), ``quantize``, ``validate``, ``fetch`` and
``serve``. They talk to MLflow through :mod:`slipway.mlflow`, work on scikit-learn's digits data
set (shipped inside scikit-learn, no download) and exchange models as ONNX files. They are meant
to be copied: the contract each follows with the operator is written in its module docstring.

The modules they share: ``common.py`` (configuration, the MLflow run, the data split, the model
layout), ``classifier.py`` (the model both trainers fit and export), ``checkpoints.py`` (the
trainer's checkpoints); and the server's parts: ``servehttp.py`` (its routes and state),
``modelload.py`` (the model's loading), ``faults.py`` (the fault switches), ``servemetrics.py``
(its metrics) and ``openai_api.py`` (its OpenAI-compatible mode).

Exit codes shared by all of them: 0 success; 1 unexpected error; 2 bad configuration;
75 MLflow unavailable (retryable); 143 stopped by SIGTERM after saving its state.
"""
