"""Pass or fail, and why: the statistical tests (``stats``, ``sequential``), judging a results
document against a reference config or a stored baseline (``judge``, ``gate``), the baseline
store (``baselines``) and change points over nightly history (``history``).

Works on results documents (plain dicts); may import :mod:`pytest_specdec.core` and
:mod:`pytest_specdec.measure`, never engines, the GPU layer, reports or sessions.
"""
