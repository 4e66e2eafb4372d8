"""The lab's commands: one module per command of ``scripts/``, its flags, its messages and its
``main`` (``python3 scripts/lab.py specdec_lab.cli.NAME``, which the wrapper runs). A command
may import any layer of the lab below it, and no other command."""
