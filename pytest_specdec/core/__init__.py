"""What a run is about, as data: speculative configs and their presets, the suite file, the
prompt workloads, the results schema, model-file identity, the value parsers every face
shares, and the table of installed engines (``engine_table``: names and where each adapter
comes from; the adapters themselves live in :mod:`pytest_specdec.engines`).

The bottom layer: it imports nothing else from the package.
"""
