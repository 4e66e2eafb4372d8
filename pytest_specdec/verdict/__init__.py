"""Pass or fail, and why: the statistical tests (``stats`` over ``numbers``; ``planning`` for
runs needed and sequential plans; ``suite`` for the score over prompts), a results document's
sessions (``sessions``), judging against a reference config or a stored baseline
(``judge``), the gate across configs (``gate``), the baseline store (``baselines``) and change
points over nightly history (``history``).

Works on results documents (plain dicts); may import :mod:`pytest_specdec.core` and
:mod:`pytest_specdec.measure`, never engines, the GPU layer, reports or sessions.
"""
