"""sdbench: the library behind the speculative-decoding benchmark workflow.

All logic lives here (importable and testable without Snakemake); the Snakemake rules and
scripts under workflow/ only name inputs/outputs and call into this package.
"""

__version__ = "0.1.0"
