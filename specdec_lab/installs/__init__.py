"""Installs: SGLang for an air-gapped GPU runner (``wheelhouse``, ``probe``), an SGLang fork's
wheel (``fork_wheel``) and the project's oldest install (``lowest``)."""
