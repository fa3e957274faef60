"""The exit-code table is defined once: errors, `--help` and README all follow EXIT_CODES."""

from __future__ import annotations

from opsctl.core import errors
from opsctl.core.paths import project_root

BEGIN = "<!-- exit-codes:"
END = "<!-- /exit-codes -->"


def test_readme_table_is_the_generated_one() -> None:
    readme = (project_root() / "README.md").read_text()
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1, "README lost its exit-codes markers"
    block = readme.split(BEGIN, 1)[1].split("\n", 1)[1].split(END, 1)[0]
    assert block == errors.exit_codes_markdown(), (
        "README's exit-code table drifted from opsctl/core/errors.py EXIT_CODES; paste the "
        "output of `python -c 'from opsctl.core.errors import exit_codes_markdown as m; "
        "print(m(), end=\"\")'`"
    )


def test_every_error_class_exits_with_a_documented_code() -> None:
    documented = {code.code for code in errors.EXIT_CODES}
    classes = [errors.OpsctlError, *errors.OpsctlError.__subclasses__()]
    assert len(classes) > 5
    for cls in classes:
        assert cls.exit_code in documented, cls.__name__
    assert len(documented) == len(errors.EXIT_CODES)


