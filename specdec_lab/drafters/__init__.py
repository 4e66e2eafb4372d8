"""Drafters for SGLang's own speculative algorithms, made from a seed (``seeded``,
``scripts/make-sglang-drafters``)."""
