"""Running the workflow from tests."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args, workdir=None, configfile=None, timeout=600, cwd=None):
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--cores", "2", "--resources", "gpu=1"]
    if workdir is not None:
        cmd += ["-d", str(workdir)]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO)


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a (dry) run: {rule: count}."""
    counts: dict[str, int] = {}
    if "Job stats:" not in output:
        return counts
    table = output.split("Job stats:", 1)[1]
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    counts.pop("total", None)
    return counts
