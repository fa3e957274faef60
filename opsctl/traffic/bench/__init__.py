"""bench: the concurrency sweep (`opsctl bench`, decide's and tune's sweeps) and what it writes.

sweep (options, targets, run_bench), stats (a level's figures), levels (one level's phases),
arrival (closed loop, Poisson, trace times), workers (client processes), workloads and prompts
(what is sent), records (the per-request files, re-scoring), report and markdown (bench.json,
bench.md), serving and serving_read (sglang.bench_serving's JSONL), drivers and driver_sglang
(who sends the load), server_sampler and gpu_sample (the server's own figures around a level).
"""
