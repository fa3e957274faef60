"""The README's variant table is generated from the `profile resolve` records (what sglang's own
resolution recorded), never written by hand: a stale table or a variant without a record fails."""

from __future__ import annotations

from opsctl.config.profiles import load_profile
from opsctl.config.review import VARIANT_TABLE_BEGIN, replace_variant_table, variant_table
from opsctl.core.paths import project_root


def test_readme_variant_table_is_the_records() -> None:
    readme = (project_root() / "README.md").read_text()
    table = variant_table(load_profile("glm5-nvfp4-rtx6000"))
    assert replace_variant_table(readme, table) == readme, \
        "README.md's variant table is stale: run python3 scripts/variant_table.py"
    assert VARIANT_TABLE_BEGIN in readme and "no current record" not in table
    assert "| `native` | 0.5.23 | dsa | flashinfer_sparse_mla / flashinfer_sparse_mla |" in table
    gathercast = (
        "| `gathercast` | 0.5.23 | flashinfer | trtllm / trtllm | fp8_e4m3, 576-byte rows | off |"
    )
    assert gathercast in table
