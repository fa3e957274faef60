"""opsctl-sim: a process that speaks the pinned sglang HTTP API (0.5.23 by default), without a GPU.

It is the embedded default target of the README demo and of CI, and a fixture for the smoke,
bench and monitoring tests. Every path, JSON shape, metric name, type, bucket and label below
was checked against the sglang 0.5.23 wheel (``srt/entrypoints/http_server.py``,
``srt/entrypoints/openai/``, ``srt/observability/metrics_collector.py``, ``srt/utils/auth.py``).
Its OpenAI bodies (model list, completions, chat, SSE chunks, usage, errors) are checked
against both pinned releases' own pydantic models (``srt/entrypoints/openai/protocol.py``) by
``tests/component/test_sim_protocol.py``, its info keys against their source by
``tests/component/test_sim_info_keys.py`` (docs/architecture.md, "The simulator against sglang").

It runs inside a minimal Debian bookworm image with only python3 and ``prometheus_client``,
so this package imports nothing but the standard library, ``prometheus_client`` and itself
(``tests/unit/test_sim_imports.py`` enforces it).

Start::

    python3 -m opsctl.sim --model-path /models/GLM-5-NVFP4 --served-model-name glm-5 \\
        --host 0.0.0.0 --port 30000 --enable-metrics --extra-metric-labels '{"variant":"x"}'
    opsctl sim <the same sglang flags>

It takes sglang's launch flags. It uses ``--model-path``/``--model``, ``--served-model-name``
(default: the model path, as sglang), ``--tokenizer-path``, ``--host`` (default 127.0.0.1),
``--port`` (default 30000), ``--api-key``, ``--enable-metrics``, ``--extra-metric-labels``
(JSON; added to every ``sglang:`` series except the ``sglang:http_*`` ones, as sglang does),
``--max-running-requests`` (more concurrent requests queue), ``--context-length``,
``--bucket-time-to-first-token``/``--bucket-inter-token-latency``/``--bucket-e2e-request-latency``,
``--weight-version``; every flag it is given is echoed by ``/server_info`` (snake_case keys);
unknown ``--flag [value ...]`` pairs are accepted and otherwise ignored.

``/server_info`` and ``/model_info`` take the shape of the release named by
``OPSCTL_SIM_SGLANG_VERSION`` (``0.5.23`` default, or ``0.5.15``; fixed at start-up), and the
settings ``opsctl verify`` checks (attention and DSA backends, KV dtype, page size, TP size,
quantization, decode CUDA-graph size, served name, model path) carry what that release resolves
for the given flags on the simulated device, defaults filled in (``opsctl.sim.releases``).
When the resolved attention backend is flashinfer it prints the gather-then-cast patch's
start-up line to stdout, ``active`` with ``OPSCTL_KV_GATHER_CAST=1`` and an FP8 KV cache,
``inactive`` with the reason otherwise (``opsctl.sim.patchmarker``). ``/server_info``,
``/model_info`` and that line follow the release; the OpenAI bodies (``opsctl.sim.shapes``) and
the metrics are 0.5.23's.

Behaviour (environment variables; the admin endpoint takes the same keys, lower case, no prefix):

=================================  =======  ========================================================
``OPSCTL_SIM_LOAD_SECONDS``        0        port closed this long before listening (loading weights)
``OPSCTL_SIM_WARMUP_SECONDS``      0        after listening: ``/health``, ``/health_generate``,
                                            ``/ready`` and generation endpoints answer 503 this
                                            long; ``/v1/models``, ``/model_info``,
                                            ``/server_info`` answer 200
``OPSCTL_SIM_TTFT_MS``             50       time to first token (after admission)
``OPSCTL_SIM_ITL_MS``              20       inter-token latency with one running request
``OPSCTL_SIM_ITL_SLOPE_MS``        0        ITL grows by this per additional running request
``OPSCTL_SIM_FAULT``               none     none | die_while_loading | hang | stream_cut |
                                            slow_first_token | error_rate | corrupt |
                                            misresolve
``OPSCTL_SIM_STREAM_CUT_AFTER``    3        stream_cut: tokens sent before the connection drops
``OPSCTL_SIM_ERROR_RATE``          0        error_rate: the fraction of generation requests that
                                            answer 500 (deterministic: round-down(n * rate) of n)
``OPSCTL_SIM_EXTRA_MODELS``        ""       comma-separated extra ids listed by ``/v1/models``
``OPSCTL_SIM_KV_USAGE``            unset    pins ``sglang:token_usage`` (0..1); unset: derived from
                                            the tokens of running requests
``OPSCTL_SIM_HEALTH_DELAY_MS``     0        extra latency of ``/health`` and ``/health_generate``
                                            (real sglang takes about 1000 ms: it generates a token)
``OPSCTL_SIM_TRACE_CAST``          auto     the traces /start_profile writes: ``auto`` carries the
                                            full-pool KV cast where the flags say stock flashinfer
                                            + FP8 KV (switch off), ``on``, ``off``
=================================  =======  ========================================================

Profiler: ``/start_profile`` and ``/stop_profile`` as sglang's (``opsctl.sim.profiler``) write
a synthetic torch-profiler Chrome trace per TP rank. Knobs for ``opsctl tune``
(``opsctl.sim.config``): a decode batch above the decode CUDA-graph cap runs 1.5x slower per
token; ``--mem-fraction-static`` above 0.93 fails start-up with a CUDA OOM (exit 1).

Faults: ``die_while_loading`` logs sglang's scheduler-exception lines with a CUDA OOM and exits 1
halfway through the load period; ``hang``: generation requests never answer, ``/health`` and
``/health_generate`` answer 503 after ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds (default 20, the
sglang variable and default) and from then on ``/ready`` answers 503 until a probe succeeds;
``stream_cut``: streaming responses stop after N tokens without the finish chunk, the usage
chunk, ``[DONE]`` or the chunked-encoding terminator (non-streaming requests are not affected);
``slow_first_token``: TTFT x 20; ``corrupt``: greedy outputs differ from the uncorrupted ones
(still deterministic), as a broken attention patch would; ``misresolve``: ``/server_info``
reports another attention backend than the flags resolve to (triton, or flashinfer when they
resolve to triton), as a launcher that dropped or rewrote a flag would.

Admin (not sglang's API; never behind the API key): ``GET /_sim/config`` returns the current
behaviour as JSON; ``POST /_sim/config`` with a JSON object of some of the keys above (e.g.
``{"itl_ms": 50, "fault": "error_rate", "error_rate": 0.5}`` or ``{"kv_usage": 0.95}``;
``null`` resets ``kv_usage``) changes it at once and returns the new behaviour; an unknown key or
a bad value answers 400 and changes nothing.

Generation: the text is a deterministic function of the prompt (words of a small fixed vocabulary,
one token per word). At temperature 0 the same prompt always gives the same tokens, the same in
streaming and non-streaming mode, and a longer ``max_tokens`` extends a shorter one. With
temperature > 0 the output is random unless ``seed`` is given. Each prompt has a natural length of
32..1023 tokens: below ``max_tokens`` the request finishes with ``stop`` (the last token is EOS:
counted in ``completion_tokens``, no text, as sglang does), otherwise with ``length`` (one content
chunk per token; ``ignore_eos`` forces ``length``). Prompt token counts come from a simple
deterministic word/punctuation split, not a real tokenizer.

Graceful SIGTERM/SIGINT: ``/health`` answers 503, the listener closes, in-flight requests get up to
two seconds, then the rest are cut and the process exits 0.
"""
