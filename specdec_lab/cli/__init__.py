"""The lab's commands: one module per command, its flags and its ``main``, run by the wrapper of
the same name in ``scripts/`` (``python3 scripts/lab.py specdec_lab.cli.NAME``)."""
