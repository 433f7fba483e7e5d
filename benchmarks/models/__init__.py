"""Five models (a char-level GPT, LSTM and GRU language models, the guide CNN, an MLP), one
training step each, ember against PyTorch eager on the CPU: ``python -m benchmarks.models``.
`run` describes the measurement; `_harness` holds what the models share."""
