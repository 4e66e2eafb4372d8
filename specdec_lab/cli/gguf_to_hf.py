"""``scripts/gguf-to-hf``: the Hugging Face folder of a llama GGUF model, or ``--verify``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_lab.formats.folder import LayoutError
from specdec_lab.models.hf_layout import convert, verify


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="gguf-to-hf",
        description="The Hugging Face folder (config.json, model.safetensors in F16, tokenizer) "
        "of a llama GGUF model, for SGLang and vLLM; --verify compares the two tensor by tensor.",
    )
    p.add_argument("gguf", type=Path, help="a llama GGUF file (quantized tensors are dequantized)")
    p.add_argument("out", type=Path, help="the folder to write (or, with --verify, to check)")
    p.add_argument(
        "--verify",
        action="store_true",
        help="only compare OUT with GGUF; exit 1 if any tensor differs",
    )
    args = p.parse_args(argv)
    if not args.gguf.is_file():
        p.error(f"{args.gguf} is not a file; give the path of a llama GGUF model")
    try:
        if args.verify:
            report = verify(args.gguf, args.out)
            print(json.dumps(report, indent=2))
            return 0 if report["equal"] else 1
        config = convert(args.gguf, args.out)
    except LayoutError as exc:
        print(f"gguf-to-hf: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.out}: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
        f"vocab {config['vocab_size']}; verify with --verify"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
