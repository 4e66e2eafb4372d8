"""A drafter's recipe: every setting that decides its bytes, recorded in its sidecar; a folder
whose recipe matches is kept as it is. ``generator`` names the code that made it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec_lab.training.prompts import workload_prompts

GENERATOR = "pytest-specdec make-dflash-drafter 4"


@dataclass(frozen=True)
class Recipe:
    seed: int = 1
    prompts: int = 16384
    gen_tokens: int = 160
    gen_batch: int = 512
    layers: int = 3
    ffn: int = 1536
    target_layer_ids: tuple[int, ...] = (1, 8, 14, 20, 27)
    block_size: int = 16
    mask_token_id: int = 0
    steps: int = 9000
    batch: int = 32
    anchors: int = 16
    lr: float = 8e-4
    warmup: int = 200
    gamma: float = 7.0
    eval_every: int = 250
    eval_sequences: int = 64
    eval_workload: str = "seed"  # the suite's prompts the accept length is also measured on
    generator: str = GENERATOR

    def check(self) -> None:
        for name in ("prompts", "gen_batch", "layers", "ffn", "steps", "batch"):
            if getattr(self, name) < 1:
                raise SystemExit(f"make-dflash-drafter: --{name.replace('_', '-')} must be >= 1")
        if self.gen_tokens < 2:
            raise SystemExit(
                f"make-dflash-drafter: --gen-tokens {self.gen_tokens}: give 2 or more (a drafted "
                "token needs one after it to be checked against)"
            )
        if self.block_size < 2:
            raise SystemExit(f"make-dflash-drafter: --block-size {self.block_size}: give 2 or more")
        if not 1 < self.eval_sequences < self.prompts:
            raise SystemExit(
                f"make-dflash-drafter: --eval-sequences {self.eval_sequences} must be between 2 "
                f"(half choose the weights kept, half report) and --prompts - 1 "
                f"({self.prompts - 1})"
            )
        if self.eval_workload:
            workload_prompts(self.eval_workload)  # names the workloads there are
