"""The lab: what the plugin's GPU runs need made or installed, beside the plugin.

Model making, drafter making and training, SGLang for a GPU runner, and the engine-side
slowdown of the regression tests. The commands in ``scripts/`` run its modules from a plain
checkout, with nothing installed (``scripts/lab.py``). Nothing of ``pytest_specdec`` imports
it; it imports ``pytest_specdec.core`` only (file hashes, the cache folder). Not in the wheel:
it needs the repository (the wrappers, the committed start sets, the suite's prompts).

The lab's layers, top to bottom; a module imports from its own layer and the layers below,
never above (pyproject.toml's contracts, ``lint-imports``; docs/architecture.md):

    cli | inject           entry points: one module per command of scripts/; the sitecustomize
                           that scripts/sglang_inject loads into the engine's processes
    training | installs    a DFLASH drafter distilled from its target (torch); SGLang's
                           wheelhouse, its probe, a fork's wheel, the oldest install
    models | drafters      GGUF in Hugging Face layout, the memory-bound models; the drafters'
                           SGLang layouts and drafters from a seed
    formats                a model folder's files: model.safetensors, config.json, the sidecar
"""
