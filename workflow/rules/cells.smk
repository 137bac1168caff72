# One job per server session (a configuration instance: sdbench.plan.sessions): its server
# starts once and measures every due point of every cell of its configuration, into the point
# cache. A cell's own job then writes its records from its sessions' manifests (a local job:
# it reads files, nothing else).


rule session:
    input:
        unpack(session_inputs),
    output:
        manifest=layout.session_output("{session_id}"),
    params:
        session=lambda wc: SESSIONS[wc.session_id].to_dict(),
        # its cells and those paired with the same baselines (`sessions.session_family`)
        cells=lambda wc: [cell_dict(c) for c in sessions.session_family(
            SESSIONS[wc.session_id], CELLS, FAMILIES)],
        vllm=VLLM_BUILD,
        host=lambda wc: [HOST_PLAN[c.cell_id] for c in session_cells(wc)],
        # sessions that left a cell unfinished: the next run measures it again
        retries=session_retries,
    log:
        layout.SESSION_LOG,
    benchmark:
        layout.benchmark_file("session", "{session_id}")
    priority: session_priority
    threads: CELL_THREADS
    resources:
        gpu=session_gpus,
        runtime=session_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_session.py"


rule cell:
    input:
        unpack(cell_inputs),
    output:
        records=layout.cell_output("{cell_id}"),
        requests=str(layout.requests_output(layout.cell_output("{cell_id}"))),
    params:
        cell=lambda wc: cell_dict(wc.cell_id),
    log:
        layout.CELL_LOG,
    benchmark:
        layout.benchmark_file("cell", "{cell_id}")
    priority: unlocking_priority
    conda:
        ENV
    script:
        "../scripts/assemble_cell.py"


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
        baseline=lambda wc: dynamic_k.dynamic_k_baseline(
            config, DYNAMIC_K[(wc.target, wc.workload, wc.speculator)]
        ),
    log:
        layout.SCHEDULE_LOG,
    benchmark:
        layout.benchmark_file("dynamic_k_schedule", "{target}/{workload}/{speculator}")
    priority: unlocking_priority
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
        layout.DERIVED_LOG,
    benchmark:
        layout.benchmark_file("dynamic_k_cell", "{target}/{workload}/{speculator}")
    priority: dynamic_k_priority
    threads: CELL_THREADS
    resources:
        gpu=lambda wc: specs.cell_gpus(specs.server_config(config, wc.target)),
        runtime=dynamic_k_runtime,
        mem_mb=config["cells"]["mem_mb"],
    conda:
        ENV
    script:
        "../scripts/run_dynamic_k.py"
