"""Model making: a llama GGUF model in Hugging Face layout (``hf_layout``: names, rows, config,
tokenizer, convert and verify; ``scripts/gguf-to-hf``), and the memory-bound target and its
drafts made from SmolLM2 and a seed (``memory_bound``, on top of ``hf_layout``;
``scripts/make-memory-bound-models``). They may import ``specdec_lab.formats`` and
``pytest_specdec.core`` only."""
