"""The one jinja2 environment every backend renders with.

Each backend keeps its templates in its own ``templates/`` folder; a template is named
``"<backend>/<file>"``, e.g. ``render("nccl/library.cu.j2", ...)``. Settings: strict undefined
variables (a missing value is an error, never an empty string), no autoescaping (C, XML and Makefiles
are written exactly as the template says), trailing newlines kept.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


@lru_cache(maxsize=1)
def environment() -> Any:
    """The shared jinja2.Environment (built on first use: jinja2 stays off the import path)."""
    import jinja2

    loaders = {name: jinja2.FileSystemLoader(os.path.join(HERE, name, "templates"))
               for name in sorted(os.listdir(HERE)) if os.path.isdir(os.path.join(HERE, name, "templates"))}
    return jinja2.Environment(loader=jinja2.PrefixLoader(loaders), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False, trim_blocks=False)


def render(template: str, **context: Any) -> str:
    """Render ``"<backend>/<file>"`` with ``context``."""
    return str(environment().get_template(template).render(**context))
