"""What `profile show` says about a profile: each variant's release, image, what it computes on
the model, and the warnings its release's recorded facts raise (errors never get this far: they
refuse the profile when it loads). Pure: the deploy view renders it.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsctl.deploy import releases
from opsctl.deploy.profiles import Deployment, Profile, check_argv, release_findings


@dataclass(frozen=True)
class VariantSummary:
    name: str
    description: str
    sglang_version: str
    base: str
    patched: bool
    computes: str
    warnings: list[str]
    # Speculative decoding, when the variant runs it: what it is and why the patch stays off there.
    speculative: str | None = None


@dataclass(frozen=True)
class ProfileShow:
    """The chosen variant's argv, and every variant's summary (the chosen one first)."""

    deployment: Deployment
    argv: list[str]
    variants: list[VariantSummary]


def computes(deployment: Deployment) -> str:
    """One line on what attention the variant computes for the profile's model."""
    argv = check_argv(deployment)[len(deployment.server.entrypoint):]
    return releases.computes(deployment.profile.model.architecture or "", argv,
                             deployment.image.sglang_version)


def summary(deployment: Deployment) -> VariantSummary:
    spec = deployment.profile.variants[deployment.variant]
    return VariantSummary(
        name=deployment.variant,
        description=spec.description,
        sglang_version=deployment.image.sglang_version,
        base=deployment.image.base,
        patched=deployment.patched,
        computes=computes(deployment),
        warnings=release_findings(deployment).warnings,
        speculative=speculative(deployment),
    )


def speculative(deployment: Deployment) -> str | None:
    """One line on the variant's speculative decoding (MTP), None without it."""
    server = deployment.server
    if server.speculative_algorithm is None:
        return None
    shape = ", ".join(f"{name} {value}" for name, value in (
        ("steps", server.speculative_num_steps), ("top-k", server.speculative_eagle_topk),
        ("draft tokens", server.speculative_num_draft_tokens)) if value is not None)
    return (f"{server.speculative_algorithm} ({shape or 'sglang defaults'}) on the checkpoint's "
            f"draft layer; the gather-then-cast patch is refused here: {releases.PATCH_SPECULATIVE_REASON}")


def show(profile: Profile, variant: str | None = None) -> ProfileShow:
    deployment = profile.resolve(variant)
    others = [name for name in profile.variants if name != deployment.variant]
    return ProfileShow(
        deployment=deployment,
        argv=check_argv(deployment),
        variants=[summary(profile.resolve(name)) for name in [deployment.variant, *others]],
    )
