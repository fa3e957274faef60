"""`opsctl bench --driver` in a fresh process: what it refuses before any load."""

from __future__ import annotations

from opsctl.core.errors import EXIT_USAGE


def test_the_cli_refuses_an_unknown_driver_and_what_bench_serving_cannot_do(opsctl) -> None:
    unknown = opsctl("bench", "--driver", "locust", "--base-url", "http://127.0.0.1:9")
    assert unknown.returncode == EXIT_USAGE and "--driver 'locust'" in unknown.stderr
    timed = opsctl("bench", "--driver", "sglang-bench", "--dataset-name", "random",
                   "--duration", "5", "--base-url", "http://127.0.0.1:9")
    assert timed.returncode == EXIT_USAGE and "--duration" in timed.stderr
    assert "Traceback" not in timed.stderr
