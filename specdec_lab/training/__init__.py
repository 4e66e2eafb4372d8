"""Train a DFLASH drafter for a target by distillation from the target itself.

Used by ``scripts/make-dflash-drafter``. The memory-bound target is made from a seed and has no
training set of its own, and needs none: the data are the target's own greedy continuations of
prompts of the suite's kinds (code, explanation, arithmetic, JSON, verse), generated on the
GPU, and the target's hidden states along them.

What is trained is what SGLang 0.5.17 serves (``sglang/srt/models/dflash.py`` and
``speculative/dflash_worker_v2.py``), step for step:

* the context: the outputs of the target layers ``target_layer_ids`` (SGLang captures the
  residual stream at the input of layer L + 1), concatenated in layer order, through ``fc``
  and ``hidden_norm``; every draft layer projects it to keys and values as it is (no input
  norm), with its key norm and rotary position, one entry per committed token;
* the block: ``block_size`` tokens at positions ``n .. n + block_size - 1`` after ``n``
  committed tokens: the target's last token (the bonus, position ``n``), then the mask token;
  embedded with the target's embedding;
* Qwen3-style layers (per-head query/key RMS norm, SiLU MLP, pre-norm residuals) whose
  attention sees every context entry and the whole block in both directions;
* the final norm and the target's LM head; block positions 1 .. block_size - 1 are the
  drafted tokens.

The objective is DFlash's block objective: cross-entropy against the target's greedy tokens at
every drafted position, weighted by ``exp(-(k - 1) / gamma)`` for the k-th drafted token (an
early miss ends the accepted run, so early positions matter most), over many anchors per
sequence at once: one forward pass holds every anchor's block, each masked to the context
before its anchor and to its own block.

Accept length by step: a verify step at anchor ``n`` accepts the drafted tokens up to the
first one that differs from the target's greedy token, plus the target's own token, as
SGLang's greedy verification does; its mean over the anchors is written beside the loss,
every ``--eval-every`` steps, on two sets never trained on:

* held-out continuations of prompts about other things than the training prompts (every
  fourth task, topic, number, object and subject is kept out of training). The weights kept
  are those of the best evaluation here: a drafter that memorises its training sequences
  scores ever higher on prompts like them and ever lower on new ones;
* the continuations of the suite's own prompts (``--eval-workload``, default ``seed``): what
  the server will draft for, reported and never used to choose anything.

A final check recomputes some anchors the way the server does (context keys and values first,
then the block on its own) and records how far the two paths differ.

Output beside the target: ``NAME.dflash-b16-distilled-seed1.hf/`` (``config.json``,
``model.safetensors`` in float16, ``specdec-model.json``: recipe, seed, steps, the compute
dtype (bfloat16 autocast on a GPU, float32 on a CPU), loss, accept length by step, timings and
sha256). A folder whose recipe matches is kept as it is.

The modules, each importing only those below it (pyproject.toml's contract, checked by
``lint-imports``), and ``specdec_lab.drafters`` and ``specdec_lab.formats`` of the lab:

    make | chart     the drafter made and published; the training chart
    train            the training loop, the kept weights
    evaluate         accept length as the server gets it: the walk, the server-path check
    blocks           a batch of draft blocks: inputs, labels, drafted logits
    data | model     the target's continuations and hidden states; the drafter in plain torch
    recipe           every setting that decides the drafter's bytes
    prompts          the prompts drawn from a seed, the suite's own (never drawn)
    templates        the prompt templates of the suite's kinds (data)

``scripts/make-dflash-drafter`` runs it (``specdec_lab.cli.dflash_drafter``).
"""
