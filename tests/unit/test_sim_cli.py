"""``opsctl sim`` passes sglang flags through to the simulator untouched."""

from __future__ import annotations

from typer.testing import CliRunner

from opsctl.cli import app


def test_sim_passes_unknown_flags_and_values_through() -> None:
    # Unknown flags, a bare flag and a negative value reach the simulator's own parser, which
    # then refuses the bad --port (exit 2) before it would start serving.
    result = CliRunner().invoke(app, [
        "sim", "--model-path", "/models/m", "--chunked-prefill-size", "-1",
        "--trust-remote-code", "--extra-metric-labels", '{"variant":"x"}', "--port", "nope",
    ])
    assert result.exit_code == 2
    assert "--port needs an integer" in result.output


def test_sim_requires_a_model_path_like_sglang() -> None:
    result = CliRunner().invoke(app, ["sim", "--served-model-name", "glm-5"])
    assert result.exit_code == 2
    assert "--model-path is required" in result.output
