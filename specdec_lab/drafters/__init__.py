"""Drafters for SGLang's own speculative algorithms: their layouts as SGLang 0.5.17 loads them
(``layout``) and drafters made from a seed in them (``seeded``, ``scripts/make-sglang-drafters``).
Imports ``formats`` only."""
