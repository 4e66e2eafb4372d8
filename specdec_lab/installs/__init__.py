"""Installs: SGLang for an air-gapped GPU runner from a wheelhouse (``scripts/sglang-wheelhouse``:
the plan is resolved (``resolve``), the probe finds the start set (``probe``, with the code it
runs in its virtualenv, ``probe_code``, and the wheels' top-level names, ``wheels``), and the
wheelhouse is downloaded, checked and installed (``wheelhouse``); all on ``shared``), an SGLang
fork's wheel (``fork_wheel``) and the project's oldest install (``lowest``, for
``nox -s oldest``). They import nothing of the lab outside this package, and of the plugin
``pytest_specdec.core`` only (file hashes)."""
