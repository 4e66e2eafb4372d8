"""Installs: SGLang for an air-gapped GPU runner from a wheelhouse (``scripts/sglang-wheelhouse``:
the plan ``resolve``s, the ``probe`` finds the start set, the ``wheelhouse`` is downloaded,
checked and installed), an SGLang fork's wheel (``fork_wheel``) and the project's oldest install
(``lowest``, for ``nox -s oldest``). Imports nothing of the lab outside this package (and
``pytest_specdec.core`` for file hashes)."""
