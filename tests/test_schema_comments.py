"""The commented schemas in the docstrings of arena/study.py and arena/tune/__init__.py ("the values shown are the
defaults") show the defaults the dataclasses have: every `key: value` of a block that names a field with a default is
compared with that default, nested sections through their dataclasses."""
import dataclasses
import typing

import pytest
import yaml

import arena.study
import arena.tune
from arena.config import REQUIRED

# top-level keys whose value in a block is an example or a stand-in, not the field's default (name: the file's
# stem; reference: null, the first arm, which the dataclass spells "")
EXAMPLES = {"arms", "space", "name", "reference"}


def schema_block(docstring: str) -> dict:
    """The indented YAML block after the docstring's ``::``, comments stripped by the YAML reader."""
    lines = docstring.split("::\n", 1)[1].splitlines()
    block = []
    for line in lines[1:] if not lines[0].strip() else lines:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line[4:])
    return yaml.safe_load("\n".join(block))


def plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def default_of(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def compare(cls, written: dict, path: str, found: list, mismatches: list) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in written.items():
        where = f"{path}{key}"
        if (not path and key in EXAMPLES) or key not in fields:
            continue
        kind = hints[key]
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            compare(kind, value, where + ".", found, mismatches)
            continue
        default = default_of(fields[key])
        if default is dataclasses.MISSING or REQUIRED in fields[key].metadata:  # a required field shows no default
            continue
        found.append(where)
        if plain(default) != value:
            mismatches.append(f"{where}: the docstring shows {value!r}, the default is {plain(default)!r}")


@pytest.mark.parametrize("module, root, least", [(arena.study, arena.study.Study, 20), (arena.tune, arena.tune.Tune, 6)])
def test_the_schema_comments_show_the_defaults(module, root, least):
    found, mismatches = [], []
    compare(root, schema_block(module.__doc__), "", found, mismatches)
    assert not mismatches, f"{module.__name__}'s docstring schema:\n" + "\n".join(mismatches)
    assert len(found) >= least, found  # the block was read and matched the fields


def test_a_wrong_default_in_a_comment_is_found():
    doc = arena.study.__doc__.replace("samples: 8                # k samples", "samples: 9                # k samples")
    assert doc != arena.study.__doc__
    found, mismatches = [], []
    compare(arena.study.Study, schema_block(doc), "", found, mismatches)
    assert mismatches == ["evaluation.samples: the docstring shows 9, the default is 8"]
