"""The GPU as NVML sees it: device discovery and fingerprints (``nvml``), one reading of a
device (``readings``), sampled telemetry and its per-run summary (``telemetry``), the hygiene
rules that mark a run invalid (``hygiene``) and the per-run monitor that ties them to a
runner (``monitor``).

May import :mod:`pytest_specdec.core` and :mod:`pytest_specdec.measure`; knows nothing of
engines, verdicts or pytest.
"""
