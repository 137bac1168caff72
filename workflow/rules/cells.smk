# One job per cell (server config x workload): one vLLM server, the whole concurrency sweep.
# Cells of an `interleave` method are measured with their baseline in one group job (servers
# side by side, points in turn); their cell jobs then write the records from the point cache.


rule cell:
    input:
        unpack(cell_inputs),
    output:
        records="results/cells/{cell_id}.jsonl",
        requests="results/cells/{cell_id}.requests.jsonl.gz",
    params:
        cell=lambda wc: CELLS[wc.cell_id].to_dict(),
        vllm=VLLM_BUILD,
        host=lambda wc: HOST_PLAN[wc.cell_id],
    log:
        cell=grid.CELL_LOG,
        server=grid.SERVER_LOG,
    benchmark:
        timing.benchmark_file("cell", "{cell_id}")
    threads: CELL_THREADS
    resources:
        gpu=lambda wc: grid.cell_gpus(CELLS[wc.cell_id].server_config),
        runtime=cell_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_cell.py"


rule cell_group:
    input:
        unpack(group_inputs),
    output:
        manifest="results/groups/{group_id}.json",
    params:
        cells=lambda wc: [CELLS[i].to_dict() for i in GROUPS[wc.group_id]],
        vllm=VLLM_BUILD,
        host=lambda wc: [HOST_PLAN[i] for i in GROUPS[wc.group_id]],
    log:
        grid.GROUP_LOG,
    benchmark:
        timing.benchmark_file("cell_group", "{group_id}")
    threads: CELL_THREADS
    resources:
        gpu=group_gpus,
        runtime=group_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_group.py"


rule dynamic_k_cell:
    input:
        unpack(dynamic_k_inputs),
    output:
        records="results/derived/{target}/{workload}/{speculator}.jsonl",
        requests="results/derived/{target}/{workload}/{speculator}.requests.jsonl.gz",
        schedule="results/derived/{target}/{workload}/{speculator}.schedule.json",
    params:
        spec=lambda wc: DYNAMIC_K[(wc.target, wc.workload, wc.speculator)],
        vllm=VLLM_BUILD,
    log:
        cell="logs/derived/{target}/{workload}/{speculator}.log",
        server="logs/derived/{target}/{workload}/{speculator}.server.log",
    benchmark:
        timing.benchmark_file("dynamic_k_cell", "{target}/{workload}/{speculator}")
    threads: CELL_THREADS
    resources:
        gpu=lambda wc: grid.cell_gpus(grid.server_config(config, wc.target)),
        runtime=dynamic_k_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_dynamic_k.py"
