"""The lab: what the plugin's GPU runs need made or installed, beside the plugin.

Model making (``models``), drafter making (``drafters``) and training (``training``), SGLang
for a GPU runner (``installs``) and the engine-side slowdown of the regression tests
(``inject``). The commands in ``scripts/`` run these modules from a plain checkout (through
``scripts/lab.py``); nothing of ``pytest_specdec`` imports this package.
"""
