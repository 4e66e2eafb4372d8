"""What a run is about, as data: speculative configs and their presets, the suite file, the
prompt workloads, the results schema, model-file identity and the value parsers every face
shares.

The bottom layer: it imports nothing else from the package.
"""
