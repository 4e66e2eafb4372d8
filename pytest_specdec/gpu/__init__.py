"""The GPU as NVML sees it: device discovery and fingerprints (``nvml``), sampled telemetry
(``telemetry``), the hygiene rules that mark a run invalid (``hygiene``) and the per-run
session that ties them to a runner (``session``).

May import :mod:`pytest_specdec.core` and :mod:`pytest_specdec.measure`; knows nothing of
engines, verdicts or pytest.
"""
