# One job per cell (server config x workload): one vLLM server, the whole concurrency sweep.


rule cell:
    input:
        unpack(cell_inputs),
    output:
        records="results/cells/{cell_id}.jsonl",
        requests="results/cells/{cell_id}.requests.jsonl.gz",
    params:
        cell=lambda wc: CELLS[wc.cell_id].to_dict(),
    log:
        cell="logs/cells/{cell_id}.log",
        server="logs/cells/{cell_id}.server.log",
    threads: CELL_THREADS
    resources:
        gpu=config["cells"]["gpus"],
    conda:
        ENV
    script:
        "../scripts/run_cell.py"
