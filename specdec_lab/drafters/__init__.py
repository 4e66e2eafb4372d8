"""Drafters for SGLang's own speculative algorithms: their layouts as SGLang 0.5.17 loads them
(``layout``: the DFLASH and EAGLE-3 configs, weight names and shapes, a drafter's folder) and
drafters made from a seed in them (``seeded``, on top of ``layout``;
``scripts/make-sglang-drafters``). They may import ``specdec_lab.formats`` only."""
