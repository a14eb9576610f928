"""The reference workloads that run inside Slipway's pods (DESIGN.md §3).

Each is a program: ``python -m slipway.workloads.<name>`` with ``train``, ``quantize``,
``validate`` and ``serve``. They talk to MLflow through :mod:`slipway.mlflow`, work on
scikit-learn's digits data set (shipped inside scikit-learn, no download) and exchange
models as ONNX files. They are meant to be copied: the contract each follows with the
operator is written in its module docstring.

Exit codes shared by all of them: 0 success; 1 unexpected error; 2 bad configuration;
75 MLflow unavailable (retryable); 143 stopped by SIGTERM after saving its state.
"""
