# One job per cell (server config x workload): one vLLM server, the whole concurrency sweep.
# Cells of an `interleave` method are measured with their baseline in one group job (servers
# side by side, points in turn); their cell jobs then write the records from the point cache.


rule cell:
    input:
        unpack(cell_inputs),
    output:
        records=layout.cell_output("{cell_id}"),
        requests=str(layout.requests_output(layout.cell_output("{cell_id}"))),
    params:
        cell=lambda wc: CELLS[wc.cell_id].to_dict(),
        vllm=VLLM_BUILD,
        host=lambda wc: HOST_PLAN[wc.cell_id],
    log:
        cell=layout.CELL_LOG,
        server=layout.SERVER_LOG,
    benchmark:
        layout.benchmark_file("cell", "{cell_id}")
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
        manifest=layout.group_output("{group_id}"),
    params:
        cells=lambda wc: [CELLS[i].to_dict() for i in GROUPS[wc.group_id]],
        vllm=VLLM_BUILD,
        host=lambda wc: [HOST_PLAN[i] for i in GROUPS[wc.group_id]],
    log:
        layout.GROUP_LOG,
    benchmark:
        layout.benchmark_file("cell_group", "{group_id}")
    threads: CELL_THREADS
    resources:
        gpu=group_gpus,
        runtime=group_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_group.py"


# A dynamic-K schedule is derived from round 1's records of its method and baseline (its own
# job: the summary reads the schedule, the dynamic-K cell measures it).
rule dynamic_k_schedule:
    input:
        unpack(dynamic_k_round1),
    output:
        schedule=layout.dynamic_k_schedule_path("{target}", "{workload}", "{speculator}"),
    params:
        spec=lambda wc: DYNAMIC_K[(wc.target, wc.workload, wc.speculator)],
        # the vanilla cell it pairs with: its server and workload make the derived cell's id
        baseline=lambda wc: grid.dynamic_k_baseline(
            config, DYNAMIC_K[(wc.target, wc.workload, wc.speculator)]
        ),
    log:
        layout.SCHEDULE_LOG,
    benchmark:
        layout.benchmark_file("dynamic_k_schedule", "{target}/{workload}/{speculator}")
    conda:
        ENV
    script:
        "../scripts/derive_schedule.py"


rule dynamic_k_cell:
    input:
        unpack(dynamic_k_inputs),
    output:
        records=layout.dynamic_k_output("{target}", "{workload}", "{speculator}"),
        requests=str(layout.requests_output(layout.dynamic_k_output("{target}", "{workload}",
                                                                "{speculator}"))),
    params:
        spec=lambda wc: DYNAMIC_K[(wc.target, wc.workload, wc.speculator)],
        vllm=VLLM_BUILD,
    log:
        cell=layout.DERIVED_LOG,
        server=layout.DERIVED_SERVER_LOG,
    benchmark:
        layout.benchmark_file("dynamic_k_cell", "{target}/{workload}/{speculator}")
    threads: CELL_THREADS
    resources:
        gpu=lambda wc: grid.cell_gpus(grid.server_config(config, wc.target)),
        runtime=dynamic_k_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_dynamic_k.py"
