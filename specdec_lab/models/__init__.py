"""Model making: a GGUF model in Hugging Face layout (``hf_layout``, ``scripts/gguf-to-hf``) and
the memory-bound target and its drafts (``memory_bound``, ``scripts/make-memory-bound-models``)."""
