"""Renders keyshift/defaults.toml and docs/config.md from keyshift.config's models, so that
each key's default, bounds and description are declared once (the pydantic fields) and the
two listings cannot drift from them (tests/keyshift/test_config_reference.py).

It sits beside ``keyshift config`` (config_show) rather than beside keyshift.config, whose
floor it stands above. ``python -m keyshift.commands.config_reference --write`` rewrites both
files; without ``--write`` it names the ones that differ and exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from keyshift.config import ENV_PREFIX, Config, _Section

REGENERATE = "python -m keyshift.commands.config_reference --write"
WIDTH = 92
"""Comment lines in defaults.toml wrap at this width."""

_TOML_HEADER = f"""\
keyshift's defaults: a local broker, local Spark, a local Delta warehouse and a local
MLflow store under `home`. Override with a file (--config / KEYSHIFT_CONFIG) or with
environment variables KEYSHIFT_<SECTION>__<KEY>, e.g. KEYSHIFT_KAFKA__PORT=19092.

Generated from the models in keyshift/config.py (edit them there, not here) by
    {REGENERATE}
Every key with its type, bounds and environment variable: docs/config.md."""

_MD_INTRO = f"""\
# Configuration reference

<!-- Generated from the models in keyshift/config.py by `{REGENERATE}`;
     edit them there, not here (a test fails when this file drifts). -->

Every configuration key: its type, default, bounds and environment variable. The layers, each
over the one before: these defaults (also listed, with comments, in `keyshift/defaults.toml`),
then one TOML file (`--config`, else `$KEYSHIFT_CONFIG`, else the project's `keyshift.toml`
found from the current directory up), then environment variables
`KEYSHIFT_<SECTION>__<KEY>`. A wrong value stops the program at start with a message naming
the key; `keyshift config` prints the configuration in effect (secrets masked).

A file sets a key in its section:

```toml
[kafka]
port = 19092
```

or the same from the environment: `KEYSHIFT_KAFKA__PORT=19092`."""


def _sections() -> Iterator[tuple[str, type[_Section] | None, dict[str, FieldInfo]]]:
    """(section name, its model, its fields) in declaration order; the top-level keys
    (``home``) first, as section "" with no model."""
    top = {name: f for name, f in Config.model_fields.items() if not _is_section(f)}
    yield "", None, top
    for name, field in Config.model_fields.items():
        if _is_section(field):
            model = field.annotation
            yield name, model, dict(model.model_fields)


def _is_section(field: FieldInfo) -> bool:
    return isinstance(field.annotation, type) and issubclass(field.annotation, _Section)


def _description(section: str, key: str, field: FieldInfo) -> str:
    if not field.description:
        raise ValueError(f"config key {_dotted(section, key)} has no description: declare "
                         "it with Field(..., description=...) in keyshift/config.py")
    return field.description


def _dotted(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def env_var(section: str, key: str) -> str:
    """The environment variable that sets a key (keyshift.config._env_overrides' naming)."""
    return f"{ENV_PREFIX}{section.upper()}__{key.upper()}" if section \
        else f"{ENV_PREFIX}{key.upper()}"


def toml_value(value: Any) -> str:
    """A default as a TOML literal; only the kinds the models declare."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r}: no finite TOML literal")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    raise TypeError(f"{value!r}: no TOML literal for a {type(value).__name__} default")


def _comment(text: str, indent: str = "") -> list[str]:
    out = []
    for paragraph in text.split("\n\n"):
        if out:
            out.append(f"{indent}#")
        out += textwrap.wrap(" ".join(paragraph.split()), WIDTH - len(indent) - 2,
                             initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                             break_on_hyphens=False, break_long_words=False)
    return out


def _doc(model: type[_Section]) -> str:
    return " ".join((model.__doc__ or "").split())


def render_defaults_toml() -> str:
    """keyshift/defaults.toml: every key at its default, its description as a comment."""
    lines = [f"# {line}".rstrip() for line in _TOML_HEADER.splitlines()]
    for section, model, fields in _sections():
        lines.append("")
        if model is not None:
            lines += _comment(_doc(model))
            lines.append(f"[{section}]")
        for key, field in fields.items():
            lines += _comment(_description(section, key, field))
            lines.append(f"{key} = {toml_value(field.default)}")
    return "\n".join(lines) + "\n"


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return "str"
    if annotation is SecretStr:
        return "str (secret)"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


_CONSTRAINTS = (("ge", "≥ {}"), ("gt", "> {}"), ("le", "≤ {}"), ("lt", "< {}"),
                ("min_length", "length ≥ {}"), ("max_length", "length ≤ {}"),
                ("pattern", "matches `{}`"))
"""The constraints a field's metadata carries (pydantic's annotated-types markers), each an
attribute of its marker, and how the reference writes them."""


def bounds(field: FieldInfo) -> str:
    """What validation allows, from the field's declaration: its range, length, pattern or
    choices (rules across keys and a validator's own checks are in the description and the
    section's text)."""
    out = []
    if typing.get_origin(field.annotation) is Literal:
        out.append("one of " + ", ".join(f"`{choice}`" for choice in
                                         typing.get_args(field.annotation)))
    for meta in field.metadata:
        for attr, form in _CONSTRAINTS:
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(form.format(_number(value)))
    return ", ".join(out)


def _cell(text: str) -> str:
    """Markdown table cell text: a pipe would end the cell, ``<home>`` would be read as HTML."""
    return text.replace("|", "\\|").replace("<", "\\<")


def render_config_md() -> str:
    """docs/config.md: a table per section (key, type, default, bounds, variable, meaning)."""
    lines = [_MD_INTRO]
    for section, model, fields in _sections():
        lines.append("")
        if model is None:
            lines += ["## Top level", "", "Keys outside any section."]
        else:
            lines += [f"## [{section}]", "", _cell(_doc(model))]
        lines += ["", "| Key | Type | Default | Bounds | Environment variable | Description |",
                  "|---|---|---|---|---|---|"]
        for key, field in fields.items():
            bound = bounds(field)
            cells = [f"`{key}`", _type_name(field.annotation),
                     f"`{toml_value(field.default)}`", _cell(bound) if bound else "",
                     f"`{env_var(section, key)}`",
                     _cell(_description(section, key, field))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def targets(root: Path | None = None) -> dict[Path, str]:
    """Each generated file (in the source tree at ``root``) and the text it should hold."""
    root = Path(__file__).resolve().parents[2] if root is None else root
    return {root / "keyshift" / "defaults.toml": render_defaults_toml(),
            root / "docs" / "config.md": render_config_md()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m keyshift.commands.config_reference",
        description="render keyshift/defaults.toml and docs/config.md from keyshift/config.py")
    parser.add_argument("--write", action="store_true", help="rewrite the files that differ")
    args = parser.parse_args(argv)
    rendered = targets()
    stale = [path for path, text in rendered.items()
             if not path.is_file() or path.read_text() != text]
    if args.write:
        for path in stale:
            path.write_text(rendered[path])
            print(f"wrote {path}")
        return 0
    for path in stale:
        print(f"{path} differs from keyshift/config.py: run `{REGENERATE}`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
