"""The image stack of each pinned sglang release, made again from the real wheels (needs PyPI unless
cached): its == pins, and whether the transformers it pins loads GLM-5's config.json.

1. The committed patches/sglang/<version>/stack.json equals a fresh one (a hand edit fails here).
2. For every variant of every GPU profile (the GLM-5 family), the transformers its image will hold
   (its release's pin) parses the config.json written from its checkpoint's card with AutoConfig:
   executed, not read.
3. The failure the box's first run met is reproduced: transformers 4.57.1 (the pin of the
   retired sglang 0.5.9) cannot.

Side environments (pip --target) live in the wheel cache, $OPSCTL_WHEEL_CACHE/envs/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opsctl.argspec import stack
from opsctl.config.profiles import load_profile
from opsctl.core import wheels
from opsctl.core.paths import project_root, releases_root

PINNED = sorted(p.parent.name for p in releases_root().glob(f"*/{stack.STACK_FILE}"))
GPU_PROFILES = ("glm5-nvfp4-rtx6000", "glm51-nvfp4-rtx6000", "glm52-nvfp4-rtx6000")
GLM5 = project_root() / "tests" / "fixtures" / "glm5"


@pytest.mark.parametrize("version", PINNED)
def test_committed_stack_record_equals_a_fresh_one(version: str, tmp_path: Path) -> None:
    committed = json.loads(stack.stack_path(version).read_text())
    fresh = json.loads(
        stack.generate(version, wheels.cache_dir(), tmp_path / "stack.json").path.read_text()
    )
    assert fresh == committed, (
        f"patches/sglang/{version}/stack.json differs from the real wheels; "
        f"regenerate it with `{stack.stack_command(version)}`"
    )


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_every_gpu_variants_transformers_parses_its_members_config(profile: str) -> None:
    loaded = load_profile(profile)
    config_dir = project_root() / stack.MODEL_CONFIGS[loaded.model.repo or ""]
    versions = {loaded.resolve(name).image.sglang_version for name in loaded.variants}
    for version in sorted(versions):
        record = stack.load(version)
        assert record is not None and record.transformers, version
        env = stack.side_env(f"transformers=={record.transformers}")
        probed = stack.probe_configs(env, [config_dir])
        assert probed["transformers"] == record.transformers
        result = probed["configs"][str(config_dir)]
        assert result["loads"], (version, result)
        assert result["config_class"] == "GlmMoeDsaConfig"
        assert result["fields"]["kv_lora_rank"] + result["fields"]["qk_rope_head_dim"] == 576
        assert result["fields"]["index_topk"] == 2048


def test_transformers_4_57_1_cannot_load_glm5() -> None:
    probed = stack.probe_configs(stack.side_env("transformers==4.57.1"), [GLM5])
    result = probed["configs"][str(GLM5)]
    assert not result["loads"] and "glm_moe_dsa" in result["error"]
