"""Formats: the files of a model folder (``folder``: model.safetensors written and read,
config.json and the specdec-model.json sidecar). The base of the lab: it may import nothing of
the lab."""
