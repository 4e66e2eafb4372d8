"""Training: a DFLASH drafter distilled from its target (``scripts/make-dflash-drafter``)."""
