"""Formats: the files of a model folder (``folder``: model.safetensors, config.json, the
specdec-model.json sidecar). The base of the lab: imports nothing of it."""
